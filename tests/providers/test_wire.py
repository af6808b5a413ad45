"""The seam's small parts: Retry-After in its three forms, SSE event names, per-call targets."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from email.utils import formatdate

import pytest

from switchyard.core.deployments import DeploymentConfig
from switchyard.providers.failures import retry_after_of
from switchyard.providers.rows import wire_for
from switchyard.providers.sse import sse_batches


def test_retry_after_seconds_ms_and_http_date() -> None:
    assert retry_after_of({"retry-after": "3"}.get) == 3.0
    assert retry_after_of({"retry-after-ms": "250", "retry-after": "3"}.get) == 0.25
    later = retry_after_of({"retry-after": formatdate(time.time() + 30, usegmt=True)}.get)
    assert later is not None and 25 < later <= 31
    assert retry_after_of({"retry-after": "soon"}.get) is None
    assert retry_after_of({}.get) is None


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for p in parts:
        yield p


async def test_sse_keeps_event_names_across_split_chunks() -> None:
    got = [b async for b in sse_batches(_chunks(b"event: message_start\ndata: {\"a\"", b":1}\n\ndata: x\n\n",
                                                b": ping\nevent: ping\ndata: {}\n\n"))]
    assert got == [[(b"message_start", b'{"a":1}'), (None, b"x")], [(b"ping", b"{}")]]


_STREAMS = {
    # OpenAI's usual form (one data line an event, no name): read whole by one regular expression
    b'data: {"a":1}\n\ndata:{"b":2}\n\ndata:  two spaces\n\ndata:\n\n'
    b'data: {"c":"data: x"}\n\ndata: [DONE]\n\n':
        [(None, b'{"a":1}'), (None, b'{"b":2}'), (None, b" two spaces"), (None, b""),
         (None, b'{"c":"data: x"}'), (None, b"[DONE]")],
    # any other form in such an arrival: event by event
    b"data: 1\ndata: 2\n\ndata: 3\n\n": [(None, b"1\n2"), (None, b"3")],
    b"data: 1\n\n: keep-alive\n\ndata: 2\nid: 5\n\n": [(None, b"1"), (None, b"2")],
    b"data: 1\n\n\n\ndata: 2\n\n": [(None, b"1"), (None, b"2")],
    b"data: 1\n\nevent: e\ndata: 2\n\n": [(None, b"1"), (b"e", b"2")],
    b"data: 1\r\n\r\ndata: 2\r\n\r\n": [(None, b"1"), (None, b"2")],
    # Anthropic's usual form: read whole by one regular expression
    b"event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: ping\ndata: {}\n\n"
    b"event:\tcontent_block_delta \ndata:{\"t\":\"a b\"}\n\nevent:\ndata:\n\n":
        [(b"message_start", b'{"type":"message_start"}'), (b"ping", b"{}"),
         (b"content_block_delta", b'{"t":"a b"}'), (b"", b"")],
    # any other form in an arrival: event by event, as before
    b"event: a\ndata: 1\ndata: 2\n\nevent: b\ndata: 3\n\n": [(b"a", b"1\n2"), (b"b", b"3")],
    b"event: a\nid: 7\ndata: 1\n\nevent: b\n\nevent: c\ndata: 2\n\n": [(b"a", b"1"), (b"c", b"2")],
    b"event: a\ndata: 1\n\n: keep-alive\n\nevent: b\ndata: 2\n\n": [(b"a", b"1"), (b"b", b"2")],
    b"event: a\r\ndata: 1\r\n\r\nevent: b\r\ndata: 2\r\n\r\n": [(b"a", b"1"), (b"b", b"2")],
}


@pytest.mark.parametrize("stream", list(_STREAMS), ids=range(len(_STREAMS)))
@pytest.mark.parametrize("size", [10_000, 1, 7, 23])
async def test_events_read_alike_in_any_form_and_any_arrivals(stream: bytes, size: int) -> None:
    parts = [stream[i:i + size] for i in range(0, len(stream), size)]
    got = [ev async for batch in sse_batches(_chunks(*parts)) for ev in batch]
    assert got == _STREAMS[stream]


def test_targets_put_the_model_in_the_path_percent_encoded() -> None:
    dep = DeploymentConfig(name="d", provider="azure", base_url="http://x", api_version="2024-10-21")
    w = wire_for(dep)
    assert w.target("chat", True, "gpt 4/o") == \
        "/openai/deployments/gpt%204%2Fo/chat/completions?api-version=2024-10-21"
    assert wire_for(DeploymentConfig(name="d", provider="sgp", base_url="http://x")).target(
        "completion", False, "m") == "/beta/completions"
