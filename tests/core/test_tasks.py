"""``stop`` ends a background loop even when something below it swallows a cancellation."""

from __future__ import annotations

import asyncio
import logging

import pytest

from switchyard.core.tasks import stop


async def test_a_loop_that_swallows_a_cancellation_is_cancelled_again_until_it_ends() -> None:
    swallowed = 0

    async def loop() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if swallowed < 3:  # as redis-py's wait_for did on Python 3.11
                    swallowed += 1
                    asyncio.current_task().uncancel()  # type: ignore[union-attr]
                    continue
                raise

    task = asyncio.create_task(loop())
    await asyncio.sleep(0.02)
    await asyncio.wait_for(stop(task), 2)
    assert task.cancelled() and swallowed == 3


async def test_a_task_that_never_stops_is_left_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    done = False

    async def stubborn() -> None:
        while not done:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                asyncio.current_task().uncancel()  # type: ignore[union-attr]

    task = asyncio.create_task(stubborn(), name="stubborn")
    with caplog.at_level(logging.WARNING, "switchyard"):
        await asyncio.wait_for(stop(task, grace=0.3), 2)
    assert not task.done()
    assert "background task stubborn did not stop within 0.3 s" in caplog.text
    done = True
    await task
