"""Stopping a background loop for good."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger("switchyard")


async def stop(task: asyncio.Task[Any] | None, grace: float = 5.0) -> None:
    """Cancel ``task`` and wait for it to end. A library below it may swallow a cancellation
    (redis-py's ``asyncio.wait_for`` on Python 3.11 did, and a gateway hung at shutdown): the task
    is cancelled again until it ends, for up to ``grace`` seconds, then left with a warning."""
    if task is None:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while not task.done():
        left = deadline - loop.time()
        if left <= 0:
            log.warning("background task %s did not stop within %g s", task.get_name(), grace)
            return
        task.cancel()
        await asyncio.wait({task}, timeout=min(left, 0.1))
    if not task.cancelled() and task.exception() is not None:
        log.error("background task %s failed", task.get_name(), exc_info=task.exception())
