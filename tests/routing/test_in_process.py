"""The router on in-process backends (no sockets): deadlines for backends without their own
timeout, and errors after the first chunk."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from switchyard.core.canonical import CanonicalRequest, Chunk
from switchyard.core.errors import GatewayError, UpstreamError
from switchyard.routing import Router, RunInfo
from switchyard.routing.health import CLOSED
from tests.routing.conftest import config, group


class Scripted:
    """A backend that plays one step per call: "ok", "stall", "fail" (502 first), "cut" (502 later)."""

    ready = True
    load_error = None

    def __init__(self, *steps: str) -> None:
        self.steps = list(steps)
        self.calls = 0

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def generate(self, req: CanonicalRequest) -> AsyncIterator[Chunk]:
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        if step == "stall":
            await asyncio.sleep(5)
        if step == "fail":
            raise UpstreamError("boom", status=502, retryable=True)
        yield Chunk(text="a")
        if step == "cut":
            raise UpstreamError("cut", status=502)
        yield Chunk(text="b", finish_reason="stop")


def router(backend: Scripted) -> Router:
    return Router(config(group("m/x", {"name": "e", "backend": "engine"})), {"m/x/e": backend})


def req(**kw) -> CanonicalRequest:
    return CanonicalRequest(kind="completion", model="m/x", dialect="openai", prompt=["hi"], **kw)


async def run(r: Router, rq: CanonicalRequest, info: RunInfo) -> list[str]:
    gen = r.stream(rq, r.resolve("m/x"), info)
    try:
        return [ch.text async for ch in gen]
    finally:
        await gen.aclose()


async def test_deadline_cuts_a_stalled_backend_without_its_own_timeout():
    b = Scripted("stall")
    r = router(b)
    info = RunInfo()
    with pytest.raises(GatewayError) as e:
        await run(r, req(timeout=0.1), info)
    assert e.value.status == 504 and b.calls == 1 and info.attempts == 1
    assert r.resolve("m/x").targets[0].health.inflight == 0


async def test_error_after_the_first_chunk_propagates_without_retry():
    b = Scripted("cut", "ok")
    r = router(b)
    info = RunInfo()
    got: list[str] = []
    with pytest.raises(UpstreamError):
        gen = r.stream(req(), r.resolve("m/x"), info)
        async for ch in gen:
            got.append(ch.text)
    assert got == ["a"] and b.calls == 1 and info.attempts == 1
    h = r.resolve("m/x").targets[0].health
    assert h.inflight == 0 and h.breaker.failures == 1  # counted against its health all the same


async def test_failures_before_the_first_chunk_are_retried():
    b = Scripted("fail", "fail", "ok")
    r = router(b)
    info = RunInfo()
    assert await run(r, req(), info) == ["a", "b"]
    assert info.attempts == 3 and info.deployment == "m/x/e"
    assert r.resolve("m/x").targets[0].health.breaker.failures == 0


async def test_closing_early_frees_the_deployment():
    b = Scripted("ok")
    r = router(b)
    gen = r.stream(req(), r.resolve("m/x"), RunInfo())
    assert (await anext(gen)).text == "a"
    assert r.resolve("m/x").targets[0].health.inflight == 1
    await gen.aclose()  # the caller went away
    assert r.resolve("m/x").targets[0].health.inflight == 0


async def test_the_last_deployment_stays_in_rotation_while_another_request_probes_it():
    b = Scripted("ok")
    r = router(b)
    breaker = r.resolve("m/x").targets[0].health.breaker
    breaker.failure(0.0, hold=0.001)  # opened, and long since due for a probe
    breaker.acquire(r.clock())  # another request is probing right now
    assert await run(r, req(timeout=5), RunInfo()) == ["a", "b"]  # served all the same, no 503
    assert b.calls == 1 and breaker.state == CLOSED


async def test_a_callers_deadline_does_not_count_against_the_deployment():
    b = Scripted("stall", "ok")
    r = router(b)
    with pytest.raises(GatewayError) as e:
        await run(r, req(timeout=0.05), RunInfo())
    assert e.value.status == 504
    breaker = r.resolve("m/x").targets[0].health.breaker
    assert breaker.failures == 0 and breaker.state == CLOSED and not breaker.probing
