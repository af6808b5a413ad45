"""Upstream faults with respx standing in for the network: connect errors, timeouts, malformed
answers, 5xx and 4xx, broken streams. First at the backend, then through a real gateway."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import respx

from switchyard.core.deployments import DeploymentConfig
from switchyard.core.errors import UpstreamError
from switchyard.dialects.chat import CHAT
from switchyard.dialects.parse import parse_request
from switchyard.dialects.registry import DIALECTS
from switchyard.providers import UpstreamBackend
from switchyard.routing import Router
from tests.gateway.conftest import KEY, base_config
from tests.gateway.helpers import sse_events, sse_objects

BASE = "http://upstream.test/v1"
SECRET = "sk-upstream-secret-123"


def backend(router: respx.Router, dialect: str = "openai", **dep: Any) -> UpstreamBackend:
    d = DeploymentConfig(name="d1", base_url=BASE, dialect=dialect, api_key=SECRET, **dep)
    return UpstreamBackend(d, "v/m", transport=httpx.MockTransport(router.handler))


def creq(stream: bool = False, dialect: str = "openai", **fields: Any):
    return parse_request(DIALECTS[dialect], {"model": "v/m", "prompt": "hi", "stream": stream, **fields},
                         kind="completion")


async def run(b: UpstreamBackend, r) -> list[Any]:
    try:
        return [ch async for ch in b.generate(r)]
    finally:
        await b.aclose()


async def fails(b: UpstreamBackend, r) -> UpstreamError:
    with pytest.raises(UpstreamError) as e:
        await run(b, r)
    assert SECRET not in e.value.message
    return e.value


def sse(*objs: str) -> bytes:
    return b"".join(b"data: " + o.encode() + b"\n\n" for o in objs)


def text_event(t: str, finish: str | None = None) -> str:
    return json.dumps({"id": "u", "model": "up",
                       "choices": [{"index": 0, "text": t, "finish_reason": finish}]})


async def pieces(*parts: bytes, then: Exception | None = None) -> AsyncIterator[bytes]:
    for p in parts:
        yield p
    if then is not None:
        raise then


# --- the backend -------------------------------------------------------------------------------

@pytest.mark.parametrize(("exc", "status"), [
    (httpx.ConnectError("refused"), 502),
    (httpx.ConnectTimeout("connect timed out"), 504),
    (httpx.ReadTimeout("read timed out"), 504),
    (httpx.RemoteProtocolError("peer closed"), 502),
])
async def test_transport_failures(exc: Exception, status: int) -> None:
    router = respx.Router(assert_all_called=False)
    router.post(f"{BASE}/completions").mock(side_effect=exc)
    e = await fails(backend(router), creq())
    assert e.status == status and e.retryable


async def test_malformed_json_is_502() -> None:
    router = respx.Router()
    router.post(f"{BASE}/completions").mock(return_value=httpx.Response(200, content=b"{not json"))
    e = await fails(backend(router), creq())
    assert e.status == 502 and "malformed" in e.message


async def test_malformed_stream_event_is_502_after_good_chunks() -> None:
    router = respx.Router()
    router.post(f"{BASE}/completions").mock(return_value=httpx.Response(
        200, headers={"content-type": "text/event-stream"},
        content=pieces(sse(text_event("ok"), "{broken"))))
    b = backend(router)
    got = []
    with pytest.raises(UpstreamError) as e:
        async for ch in b.generate(creq(stream=True)):
            got.append(ch.text)
    await b.aclose()
    assert got == ["ok"] and e.value.status == 502


@pytest.mark.parametrize(("status", "body", "message", "retryable"), [
    (500, {"error": {"message": "kaboom"}}, "kaboom", True),
    (503, b"<html>Service Unavailable</html>", "Service Unavailable", True),
    (400, {"error": {"message": "bad prompt", "type": "invalid_request_error"}}, "bad prompt", False),
    (422, {"detail": [{"loc": ["body", "n"], "msg": "n too big"}]}, "n too big", False),
    (404, {"error": "no such model"}, "no such model", False),
])
async def test_http_errors(status: int, body: Any, message: str, retryable: bool) -> None:
    router = respx.Router()
    resp = (httpx.Response(status, content=body) if isinstance(body, bytes)
            else httpx.Response(status, json=body))
    router.post(f"{BASE}/completions").mock(return_value=resp)
    e = await fails(backend(router), creq())
    # Upstream server errors reach the caller as 502 (503 and 504 keep their meaning).
    shown = 502 if status >= 500 and status not in (503, 504) else status
    assert e.status == shown and message in e.message and e.retryable is retryable
    if 400 <= status < 500:
        assert e.type == "invalid_request_error"


async def test_429_carries_retry_after() -> None:
    router = respx.Router()
    router.post(f"{BASE}/completions").mock(return_value=httpx.Response(
        429, headers={"retry-after": "3"}, json={"error": {"message": "slow down"}}))
    e = await fails(backend(router), creq())
    assert e.status == 429 and e.retry_after == 3.0 and e.retryable and e.type == "rate_limit_error"


async def test_stream_broken_off_mid_way_is_502() -> None:
    router = respx.Router()
    router.post(f"{BASE}/completions").mock(return_value=httpx.Response(
        200, headers={"content-type": "text/event-stream"},
        stream=_Broken()))
    b = backend(router)
    got = []
    with pytest.raises(UpstreamError) as e:
        async for ch in b.generate(creq(stream=True)):
            got.append(ch.text)
    await b.aclose()
    assert got == ["a"] and e.value.status == 502


class _Broken(httpx.AsyncByteStream):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield sse(text_event("a"))
        raise httpx.ReadError("connection reset")


async def test_sse_split_at_odd_boundaries() -> None:
    raw = sse(text_event("al"), text_event("pha", "stop")) + b"data: [DONE]\n\n"
    parts = [raw[i:i + 7] for i in range(0, len(raw), 7)]
    router = respx.Router()
    router.post(f"{BASE}/completions").mock(return_value=httpx.Response(
        200, headers={"content-type": "text/event-stream"}, content=pieces(*parts)))
    chunks = await run(backend(router), creq(stream=True))
    assert "".join(c.text for c in chunks) == "alpha"
    assert chunks[-1].finish_reason == "stop"


@pytest.mark.parametrize("together", [True, False])
async def test_chunks_that_arrived_with_the_streams_end_say_more_follows(together: bool) -> None:
    """``Chunk.more``: what the gateway may write to the caller together. Events that arrived in
    one piece with ``[DONE]`` are all followed at once (by the close); the last of a piece the end
    did not come with is not."""
    events = sse(text_event("a"), text_event("b", "stop"))
    parts = (events + b"data: [DONE]\n\n",) if together else (events, b"data: [DONE]\n\n")
    router = respx.Router()
    router.post(f"{BASE}/completions").mock(return_value=httpx.Response(
        200, headers={"content-type": "text/event-stream"}, content=pieces(*parts)))
    chunks = await run(backend(router), creq(stream=True))
    assert [c.text for c in chunks] == ["a", "b"]
    assert [c.more for c in chunks] == [True, together]


async def test_sse_comments_crlf_and_multiline_data() -> None:
    raw = (b": keep-alive\r\n\r\n" + b"data: " + text_event("x").encode() + b"\r\n\r\n"
           + b"event: ping\ndata: [DONE]\n\n")
    router = respx.Router()
    router.post(f"{BASE}/completions").mock(return_value=httpx.Response(
        200, headers={"content-type": "text/event-stream; charset=utf-8"}, content=pieces(raw)))
    chunks = await run(backend(router), creq(stream=True))
    assert [c.text for c in chunks] == ["x"]


@pytest.mark.parametrize(("dialect", "header", "value", "path"), [
    ("openai", "authorization", f"Bearer {SECRET}", "/completions"),
    ("llamacpp", "authorization", f"Bearer {SECRET}", "/completions"),
    ("sgp", "x-api-key", SECRET, "/beta/completions"),
])
async def test_upstream_auth_and_path(dialect: str, header: str, value: str, path: str) -> None:
    router = respx.Router()
    route = router.post(f"{BASE}{path}").mock(return_value=httpx.Response(200, json={
        "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2,
                  "prompt_tokens_details": {"cached_tokens": 1}}}))
    chunks = await run(backend(router, dialect), creq())
    assert route.calls.last.request.headers[header] == value
    assert chunks[0].text == "ok" and chunks[-1].usage.cached_tokens == 1


async def test_chat_answer_with_tool_calls_and_logprobs() -> None:
    router = respx.Router()
    router.post(f"{BASE}/chat/completions").mock(return_value=httpx.Response(200, json={
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": None,
                                 "tool_calls": [{"id": "c1", "type": "function",
                                                 "function": {"name": "f", "arguments": "{}"}}]},
                     "logprobs": {"content": [{"token": "a", "logprob": -0.1, "top_logprobs": []}]}}]}))
    r = parse_request(CHAT, {"model": "v/m", "messages": [{"role": "user", "content": "x"}]}, kind="chat")
    chunks = await run(backend(router), r)
    assert chunks[0].tool_calls[0]["function"]["name"] == "f"
    assert chunks[0].finish_reason == "tool_calls" and chunks[0].logprobs[0].token == "a"


async def test_legacy_logprobs_are_read() -> None:
    router = respx.Router()
    router.post(f"{BASE}/completions").mock(return_value=httpx.Response(200, json={
        "choices": [{"index": 0, "text": "ab", "finish_reason": "length",
                     "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1.0, -2.0],
                                  "top_logprobs": [{"a": -1.0, "c": -3.0}, {"b": -2.0}]}}]}))
    chunks = await run(backend(router), creq(logprobs=1))
    lps = chunks[0].logprobs
    assert [(t.token, t.logprob) for t in lps] == [("a", -1.0), ("b", -2.0)]
    assert [t.token for t in lps[0].top] == ["a", "c"]
    assert chunks[0].tokens == 2


# --- through the gateway ---------------------------------------------------------------------

def gateway_with(router: respx.Router, dialect: str = "openai"):
    cfg = base_config([{"name": "v/m", "deployments": [{"name": "d1", "dialect": dialect, "base_url": BASE,
                                                        "api_key": SECRET}]}],
                      router={"retries": 0, "cooldown_failures": 100})
    return cfg, Router(cfg, backends={"v/m/d1": backend(router, dialect)})


@pytest.mark.parametrize(("side_effect", "status"), [
    (httpx.ConnectError("refused"), 502),
    (httpx.ReadTimeout("slow"), 504),
    (httpx.Response(200, content=b"<html>"), 502),
    (httpx.Response(500, json={"error": {"message": "kaboom"}}), 502),
])
@pytest.mark.parametrize(("path", "shape"), [("/v1/completions", "openai"),
                                             ("/v4/beta/completions", "sgp"),
                                             ("/completion", "llamacpp_native")])
async def test_faults_in_callers_shape(gateway_for, side_effect, status: int, path: str, shape: str) -> None:
    router = respx.Router(assert_all_called=False)
    route = router.post(f"{BASE}/completions")
    if isinstance(side_effect, Exception):
        route.mock(side_effect=side_effect)
    else:
        route.mock(return_value=side_effect)
    cfg, r = gateway_with(router)
    async with gateway_for(cfg, router=r) as client:
        resp = await client.post(path, json={"model": "v/m", "prompt": "x"}, headers={"x-api-key": KEY})
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert isinstance(err["message"], str) and err["message"]
    if shape == "llamacpp_native":
        assert err["code"] == status
    assert SECRET not in resp.text and KEY not in resp.text


async def test_stream_fault_after_first_byte_is_reported_in_the_stream(gateway_for) -> None:
    router = respx.Router()
    router.post(f"{BASE}/completions").mock(return_value=httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=_Broken()))
    cfg, r = gateway_with(router)
    async with gateway_for(cfg, router=r) as client:
        resp = await client.post("/v1/completions", json={"model": "v/m", "prompt": "x", "stream": True})
    assert resp.status_code == 200  # the status line was already sent with the first chunk
    objs = sse_objects(resp.text)
    assert objs[0]["choices"][0]["text"] == "a"
    assert objs[-1]["error"]["type"] == "upstream_error"
    assert sse_events(resp.text)[-1] == "[DONE]"


async def test_stream_from_a_transport_that_answered_already_read() -> None:
    router = respx.Router()
    router.post(f"{BASE}/completions").mock(return_value=httpx.Response(
        200, headers={"content-type": "text/event-stream"},
        content=sse(text_event("ok", "stop")) + b"data: [DONE]\n\n"))
    chunks = await run(backend(router), creq(stream=True))
    assert [c.text for c in chunks] == ["ok"]
