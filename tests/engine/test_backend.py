"""The gateway side against a real engine process on the tiny model."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import pytest_asyncio

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.deployments import DeploymentConfig, EngineConfig
from switchyard.core.errors import InvalidRequest, Unavailable
from switchyard.engine import EngineBackend

pytestmark = pytest.mark.asyncio(loop_scope="module")


def req(**kw) -> CanonicalRequest:
    kw.setdefault("prompt", ["Hello world"])
    return CanonicalRequest(kind="completion", model="local/tiny", dialect="openai", **kw)


async def wait_ready(b: EngineBackend, timeout: float = 120) -> None:
    for _ in range(int(timeout * 10)):
        if b.ready:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"engine not ready: {b.load_error}")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(tiny_dir):
    b = EngineBackend(DeploymentConfig(name="tiny", backend="engine",
                                       engine=EngineConfig(path=str(tiny_dir), dtype="float32", threads=1,
                                                           max_batch=4)))
    await b.start()
    assert not b.ready
    with pytest.raises(Unavailable, match="model is loading"):
        async for _ in b.generate(req()):
            pass
    await wait_ready(b)
    yield b
    await b.aclose()


async def test_generate_and_count(backend):
    assert backend.context_window == 256
    chunks = [c async for c in backend.generate(req(max_tokens=8, temperature=0, stream=True))]
    assert chunks[-1].usage.completion_tokens == 8
    assert await backend.count_tokens(req()) == chunks[-1].usage.prompt_tokens
    chat = CanonicalRequest(kind="chat", model="local/tiny", dialect="openai",
                            messages=[{"role": "user", "content": "hi"}])
    assert await backend.count_tokens(chat) > 3


async def test_errors_cross_the_channel(backend):
    with pytest.raises(InvalidRequest) as e:
        async for _ in backend.generate(req(top_p=5.0)):
            pass
    assert e.value.param == "top_p"


async def test_concurrent_requests_match_alone(backend):
    # in float32 (the fixture's): bfloat16 products are not batch-invariant, so there a near-tie
    # may fall differently alone and in a batch (docs/engine.md)
    prompts = ["Hello world", "red green blue", "def add(a, b):"]

    async def one(p):
        r = req(prompt=[p], max_tokens=16, temperature=0)
        return "".join([c.text async for c in backend.generate(r)])

    alone = [await one(p) for p in prompts]
    together = await asyncio.gather(*(one(p) for p in prompts))
    assert list(together) == alone


async def test_closing_the_stream_cancels(backend):
    gen = backend.generate(req(max_tokens=200, ignore_eos=True, stream=True))
    first = await gen.__anext__()
    assert first.finish_reason is None
    await gen.aclose()
    # The engine is free again: a short request completes right away.
    chunks = [c async for c in backend.generate(req(max_tokens=2, temperature=0))]
    assert chunks[-1].usage.completion_tokens == 2


async def test_crash_fails_in_flight_and_restarts(backend):
    gen = backend.generate(req(max_tokens=250, ignore_eos=True, stream=True))
    await gen.__anext__()
    os.kill(backend.pid, signal.SIGKILL)
    with pytest.raises(Unavailable, match="crashed"):
        async for _ in gen:
            pass
    await wait_ready(backend)
    assert backend.restarts == 1
    chunks = [c async for c in backend.generate(req(max_tokens=3, temperature=0))]
    assert chunks[-1].usage.completion_tokens == 3


async def test_a_chunk_with_every_field_set_crosses_the_channel_whole():
    """Chunks pickle by position (a msgspec Struct's own pickling): a field left out would arrive
    as its default."""
    import pickle

    from switchyard.engine.channel import encode
    from tests.fakes.chunks import every_field_chunk

    chunk = every_field_chunk()
    assert pickle.loads(encode(("chunk", 1, chunk))[4:])[2] == chunk
