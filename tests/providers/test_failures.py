"""Upstream failures that look like successes, and errors that must not blame (or quote) the wrong
side: through the HTTP surface, against loopback upstreams that answer with exact bytes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from switchyard.routing import Router
from tests.gateway.conftest import KEY, base_config, serve
from tests.gateway.helpers import sse_events, sse_objects
from tests.providers.test_h1 import raw_server
from tests.providers.wire import answer, completion, error, event, json_answer, sse
from tests.routing.conftest import records

MODEL = "v/m"
UPSTREAM_KEY = "sk-upstream-secret-0123456789"


def config(url: str, **router: Any):  # type: ignore[no-untyped-def]
    return base_config([{"name": MODEL, "deployments": [{"name": "d1", "base_url": url,
                                                         "api_key": UPSTREAM_KEY}]}],
                       router={"retries": 2, "backoff_base": 0.001, "backoff_max": 0.01, **router})


def body(stream: bool = False, **kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": "hi", "max_tokens": 5, "stream": stream, **kw}


async def run(raw: bytes | list[bytes], payload: dict[str, Any], **router: Any):  # type: ignore[no-untyped-def]
    """One request through a gateway whose upstream answers ``raw`` (or each of a list in turn).
    Returns (response, upstream requests seen, usage records, the deployment's breaker)."""
    answers = raw if isinstance(raw, list) else [raw]
    async with raw_server(lambda n, _: answers[min(n, len(answers)) - 1]) as (port, conns):
        r = Router(config(f"http://127.0.0.1:{port}/v1", **router))
        async with serve(r.config, router=r) as client:
            resp = await client.post("/v1/completions", json=payload)
            recs = await records(client)
    return resp, len(conns), recs, r.resolve(MODEL).targets[0].health.breaker


def assert_no_secret(text: str) -> None:
    assert UPSTREAM_KEY not in text and KEY not in text


# --- errors inside a 200 ---------------------------------------------------------------------

async def test_a_200_holding_only_an_error_is_a_502_naming_the_deployment():
    resp, sent, recs, _ = await run(json_answer({"error": {"message": "model overloaded"}}), body())
    assert resp.status_code == 502, resp.text
    msg = resp.json()["error"]["message"]
    assert "upstream d1" in msg and "model overloaded" in msg
    assert sent == 1  # the upstream did (and may have billed) the work: not retried
    assert [(x.status, x.completion_tokens) for x in recs] == [(502, 0)]


@pytest.mark.parametrize("obj", [{}, {"choices": []}, {"id": "x", "object": "text_completion"}])
async def test_a_200_without_any_choice_is_no_success(obj):
    resp, _, _, _ = await run(json_answer(obj), body())
    assert resp.status_code == 502 and "without any choice" in resp.text


async def test_an_error_event_mid_stream_ends_it_as_an_error_and_what_came_before_counts():
    raw = sse(event("a"), event(" b"), {"error": {"message": "engine crashed"}}, event(" c"), "[DONE]")
    resp, sent, recs, breaker = await run(raw, body(stream=True))
    assert resp.status_code == 200  # the first bytes were out before the error
    objs = sse_objects(resp.text)
    texts = [o["choices"][0]["text"] for o in objs if o.get("choices")]
    assert texts == ["a", " b"]  # nothing after the error event
    err = objs[-1]["error"]
    assert "upstream d1 reported an error mid-stream: engine crashed" in err["message"]
    assert sse_events(resp.text)[-1] == "[DONE]"
    assert [(x.status, x.completion_tokens) for x in recs] == [(502, 2)]  # the tokens it did send
    assert sent == 1 and breaker.failures == 1  # the deployment's failure


async def test_an_error_as_the_first_event_is_a_502_before_any_byte():
    resp, _, recs, _ = await run(sse({"error": "rate limited upstream"}, "[DONE]"), body(stream=True))
    assert resp.status_code == 502 and "rate limited upstream" in resp.json()["error"]["message"]
    assert [x.status for x in recs] == [502]


# --- streams that are not streams ------------------------------------------------------------

@pytest.mark.parametrize(("raw", "said"), [
    (json_answer(completion("whole")), "application/json, not an event stream"),
    (json_answer({"error": {"message": "streaming disabled"}}), "streaming disabled"),
    (answer(200, b"<html>hi</html>", "text/html"), "text/html"),
    (answer(200, b"data: {}\n\n", "text/plain"), "text/plain"),
], ids=["json-answer", "json-error", "html", "text-plain"])
async def test_a_streamed_request_answered_with_another_content_type_is_a_502(raw, said):
    resp, _, recs, _ = await run(raw, body(stream=True))
    assert resp.status_code == 502, resp.text
    assert said in resp.json()["error"]["message"]
    assert [x.status for x in recs] == [502]


@pytest.mark.parametrize("raw", [
    sse("[DONE]"),
    sse(),
    sse({"id": "x"}, "[DONE]"),
    answer(200, b": just a comment\n\n", "text/event-stream"),
], ids=["only-done", "empty", "no-choices", "comment"])
async def test_a_stream_without_any_event_is_an_error_never_200_with_only_done(raw):
    resp, _, recs, _ = await run(raw, body(stream=True))
    assert resp.status_code == 502, resp.text
    assert "without any event" in resp.json()["error"]["message"]
    assert [x.status for x in recs] == [502]


async def test_a_malformed_first_event_is_a_502():
    resp, _, _, _ = await run(sse("{not json", "[DONE]"), body(stream=True))
    assert resp.status_code == 502 and "malformed stream event" in resp.text


async def test_a_stream_cut_before_its_end_is_not_a_success():
    # A close-delimited event stream that stops after one unfinished event: no [DONE], no finish.
    raw = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
           b"data: " + json.dumps(event("half")).encode() + b"\n\n")
    async with raw_server(lambda n, _: raw, close_after=True) as (port, _):
        r = Router(config(f"http://127.0.0.1:{port}/v1"))
        async with serve(r.config, router=r) as client:
            resp = await client.post("/v1/completions", json=body(stream=True))
            recs = await records(client)
    assert resp.status_code == 200
    objs = sse_objects(resp.text)
    assert objs[0]["choices"][0]["text"] == "half"
    assert "ended the stream before it finished" in objs[-1]["error"]["message"]
    assert [(x.status, x.completion_tokens) for x in recs] == [(502, 1)]


async def test_a_close_delimited_stream_that_finished_is_a_success():
    raw = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
           + b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in (event("a"), event("b", "stop"))))
    async with raw_server(lambda n, _: raw, close_after=True) as (port, _):
        r = Router(config(f"http://127.0.0.1:{port}/v1"))
        async with serve(r.config, router=r) as client:
            resp = await client.post("/v1/completions", json=body(stream=True))
    assert resp.status_code == 200
    objs = sse_objects(resp.text)
    assert "error" not in objs[-1]
    assert "".join(o["choices"][0]["text"] for o in objs if o.get("choices")) == "ab"


# --- the upstream refusing the gateway's credentials ----------------------------------------

@pytest.mark.parametrize("status", [401, 403, 407])
async def test_upstream_auth_refusals_are_502s_in_the_gateways_words(status):
    said = f"Incorrect API key provided: {UPSTREAM_KEY}. You can find your key at ..."
    resp, sent, recs, breaker = await run(error(said, status), body())
    assert resp.status_code == 502, resp.text
    err = resp.json()["error"]
    assert err["message"] == f"upstream d1 refused the gateway's credentials (HTTP {status})"
    assert err["type"] == "upstream_error"
    assert_no_secret(resp.text)
    assert "Incorrect API key" not in resp.text  # the upstream's text is never relayed here
    assert sent == 1  # never retried: the same credentials would be refused again
    assert breaker.failures == 1  # the deployment is misconfigured: its fault, not the caller's
    assert [x.status for x in recs] == [502]


async def test_streamed_auth_refusal_is_the_same_502():
    resp, _, _, _ = await run(error(f"bad key {UPSTREAM_KEY}", 401), body(stream=True))
    assert resp.status_code == 502 and "refused the gateway's credentials" in resp.text
    assert_no_secret(resp.text)


async def test_relayed_upstream_messages_never_carry_the_gateways_key():
    resp, _, _, _ = await run(error(f"prompt rejected for key {UPSTREAM_KEY}", 400), body())
    assert resp.status_code == 400
    assert "prompt rejected for key [redacted]" in resp.json()["error"]["message"]
    assert_no_secret(resp.text)
    resp, _, _, _ = await run(json_answer({"error": {"message": f"key {UPSTREAM_KEY} overdrawn"}}), body())
    assert resp.status_code == 502 and "[redacted]" in resp.text
    assert_no_secret(resp.text)
