"""The seam's small parts: Retry-After in its three forms, SSE event names, per-call targets."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from email.utils import formatdate

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


def test_targets_put_the_model_in_the_path_percent_encoded() -> None:
    dep = DeploymentConfig(name="d", provider="azure", base_url="http://x", api_version="2024-10-21")
    w = wire_for(dep)
    assert w.target("chat", True, "gpt 4/o") == \
        "/openai/deployments/gpt%204%2Fo/chat/completions?api-version=2024-10-21"
    assert wire_for(DeploymentConfig(name="d", provider="sgp", base_url="http://x")).target(
        "completion", False, "m") == "/beta/completions"
