"""bench/provider_mock.py's pre-built answers (the upstreams of ``bench/overhead.py --providers``)
decode through the gateway's real rows into the same answer: N text deltas, finish ``stop`` and
the usage, for OpenAI SSE, Anthropic named events and Bedrock event-stream frames. A mock that
drifted from the wire would bench a failing stream; this catches it without running the bench."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.deployments import DeploymentConfig
from switchyard.providers.provider import UpstreamBackend
from switchyard.providers.rows import wire_for
from switchyard.providers.sse import sse_batches

_spec = importlib.util.spec_from_file_location(
    "provider_mock", Path(__file__).resolve().parents[2] / "bench" / "provider_mock.py")
assert _spec and _spec.loader
mock = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mock)

DEPS: dict[str, dict[str, Any]] = {
    "openai": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1"},
    "anthropic": {"provider": "anthropic", "base_url": "http://127.0.0.1:9", "api_key": "k",
                  "model": "claude-bench"},
    "bedrock": {"provider": "bedrock", "base_url": "http://127.0.0.1:9", "region": "us-east-1",
                "aws_access_key_id": "AK", "aws_secret_access_key": "SK", "model": "anthropic.claude-v2"},
}
SUFFIX = {"openai": b"/chat/completions", "anthropic": b"/v1/messages", "bedrock": b"/converse-stream"}


def dechunk(raw: bytes) -> tuple[bytes, list[bytes]]:
    """The head and the HTTP/1.1 chunks of one whole chunked response (the terminator checked)."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    chunks = []
    while True:
        size, _, rest = rest.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            assert rest == b"\r\n"
            return head, chunks
        chunks.append(rest[:n])
        assert rest[n:n + 2] == b"\r\n"
        rest = rest[n + 2:]


@pytest.mark.parametrize("provider", list(DEPS))
def test_mock_answer_decodes_through_the_real_row(provider: str) -> None:
    n = 7
    head, chunks = dechunk(mock.answers(n)[SUFFIX[provider]])
    assert head.startswith(b"HTTP/1.1 200 OK")
    dep = DeploymentConfig.model_validate({"name": "d", **DEPS[provider]})
    wire = wire_for(dep)
    req = CanonicalRequest(kind="chat", model="v/m", dialect="openai", stream=True, max_tokens=100,
                           messages=[{"role": "user", "content": "hi"}])
    dec = wire.codec.stream(req)
    framing = wire.framing or sse_batches

    async def arrivals() -> AsyncIterator[bytes]:
        for c in chunks:  # one network read per HTTP chunk, as the mock writes them
            yield c

    async def decode() -> list[Any]:
        out = []
        async for batch in framing(arrivals()):
            for name, payload in batch:
                out += dec.feed(name, payload)
        return out

    out = asyncio.run(decode())
    assert dec.ending() is None
    assert "".join(c.text for c in out) == "".join(mock.words(n))
    assert [c.finish_reason for c in out if c.finish_reason] == ["stop"]
    usage = next(c.usage for c in out if c.usage)
    assert (usage.prompt_tokens, usage.completion_tokens) == (mock.PROMPT_TOKENS, n)


@pytest.mark.parametrize("provider", list(DEPS))
async def test_a_stream_read_to_its_end_leaves_nothing_to_the_loops_finalizer(provider: str) -> None:
    """The reader of a stream stops at its end event; what it read through (the framing's
    generators, the answer's body) is closed then, not dropped for the event loop's finalizer hook
    to close in a task of its own (a thread-safe wake-up of the loop, per stream)."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: mock.Proto(mock.answers(5)), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    hooks = sys.get_asyncgen_hooks()
    finalized: list[str] = []

    def finalizer(agen: Any) -> None:
        finalized.append(agen.__qualname__)
        hooks.finalizer(agen)

    sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=finalizer)
    base = DEPS[provider]["base_url"].replace(":9", f":{port}")
    backend = UpstreamBackend(DeploymentConfig.model_validate({"name": "d", **DEPS[provider],
                                                               "base_url": base}), "v/m")
    req = CanonicalRequest(kind="chat", model="v/m", dialect="openai", stream=True, max_tokens=100,
                           messages=[{"role": "user", "content": "hi"}])
    try:
        for _ in range(3):
            chunks = [ch async for ch in backend.generate(req)]
            assert "".join(c.text for c in chunks) == "".join(mock.words(5))
        gc.collect()
        await asyncio.sleep(0)
    finally:
        sys.set_asyncgen_hooks(*hooks)
        await backend.aclose()
        server.close()
    assert finalized == []
