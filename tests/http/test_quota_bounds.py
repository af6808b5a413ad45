"""Quotas are bounds, through the HTTP surface: what is reserved is what the upstream may produce
(a request without max_tokens is sent with the reservation), a quota that cannot hold a request
whole lowers its max_tokens (and says so) before it refuses, and a streamed request answered with
a plain JSON body is billed what that body reports."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from switchyard.policies.limits import DEFAULT_COMPLETION_RESERVE, LOWERED_HEADER
from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import KEY, base_config, upstream_model
from tests.gateway.helpers import recording_policies

MODEL = "v/m"


def chat(content: str = "hi", **extra: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}


async def test_a_chat_without_max_tokens_is_sent_upstream_with_its_reservation(upstream, gateway_for):
    cfg = base_config([upstream_model(MODEL, upstream.url),
                       {**upstream_model("v/small", upstream.url), "context_window": 300}],
                      keys=[{"id": "k1", "team": "t", "key": KEY, "limits": {"tokens_per_day": 100_000}}])
    policies, settled = recording_policies(cfg)
    async with gateway_for(cfg, policies=policies) as client:
        r = await client.post("/v1/chat/completions", json=chat())
        assert r.status_code == 200, r.text
        assert upstream.requests[-1].bound == DEFAULT_COMPLETION_RESERVE
        assert LOWERED_HEADER not in r.headers  # the caller named no bound: nothing was lowered
        # A known window bounds it lower: what is left of the window after the prompt.
        r = await client.post("/v1/chat/completions", json={**chat(), "model": "v/small"})
        assert r.status_code == 200, r.text
        sent = upstream.requests[-1].bound
        assert 250 < sent < 300
        # The caller's own bound goes as it was.
        r = await client.post("/v1/chat/completions", json=chat(max_tokens=7))
        assert upstream.requests[-1].bound == 7
        await client.app.state.gateway.drain()  # type: ignore[attr-defined]
    # What the upstream produced never exceeds what was reserved for it.
    assert [s.usage.completion_tokens for s in settled] == [DEFAULT_COMPLETION_RESERVE, sent, 7]


async def test_concurrent_unbounded_chats_never_use_more_than_the_quota(upstream, gateway_for):
    quota = 10_410
    # An upstream that writes 2,000 tokens unless max_tokens stops it sooner.
    upstream.default = Behaviour(text=" ".join(["w"] * 2000))
    cfg = base_config([upstream_model(MODEL, upstream.url)],
                      keys=[{"id": "k1", "team": "t", "key": KEY, "limits": {"tokens_per_day": quota}}])
    policies, settled = recording_policies(cfg)
    async with gateway_for(cfg, policies=policies) as client:
        rs = await asyncio.gather(*(client.post("/v1/chat/completions", json=chat()) for _ in range(12)))
        await client.app.state.gateway.drain()  # type: ignore[attr-defined]
    assert {r.status_code for r in rs} <= {200, 429} and any(r.status_code == 200 for r in rs)
    assert sum(s.usage.total_tokens for s in settled) <= quota


async def test_a_quota_that_cannot_hold_max_tokens_lowers_it_and_says_so(upstream, gateway_for):
    cfg = base_config([upstream_model(MODEL, upstream.url)],
                      keys=[{"id": "k1", "team": "t", "key": KEY, "limits": {"tokens_per_day": 1000}},
                            {"id": "k2", "team": "t", "key": "sk-whole-or-nothing",
                             "limits": {"tokens_per_day": 1000, "shrink_max_tokens": False}}])
    async with gateway_for(cfg) as client:
        r = await client.post("/v1/chat/completions", json=chat(max_tokens=2000))
        assert r.status_code == 200, r.text
        lowered = int(r.headers[LOWERED_HEADER])
        assert 900 < lowered < 1000
        assert upstream.requests[-1].bound == lowered
        assert r.json()["choices"][0]["finish_reason"] == "length"
        # Now nothing is left, not even for a small answer: a 429 naming the quota.
        r = await client.post("/v1/chat/completions", json=chat(max_tokens=2000))
        assert r.status_code == 429 and "daily token quota 1000" in r.json()["error"]["message"]
        # A key that set it off is refused whole, with its quota untouched.
        r = await client.post("/v1/chat/completions", json=chat(max_tokens=2000),
                              headers={"authorization": "Bearer sk-whole-or-nothing"})
        assert r.status_code == 429 and LOWERED_HEADER not in r.headers
        r = await client.post("/v1/chat/completions", json=chat(max_tokens=900),
                              headers={"authorization": "Bearer sk-whole-or-nothing"})
        assert r.status_code == 200 and LOWERED_HEADER not in r.headers
        assert upstream.requests[-1].bound == 900


async def test_a_spend_quota_lowers_max_tokens_to_what_the_remainder_buys(upstream, gateway_for):
    # $10 per 1M completion tokens: $0.005 buys at most 500 completion tokens (less the prompt).
    model = {**upstream_model(MODEL, upstream.url), "price": {"prompt_per_1m": 10, "completion_per_1m": 10}}
    cfg = base_config([model], teams=[{"name": "t", "limits": {"spend_per_day": 0.005}}])
    async with gateway_for(cfg) as client:
        r = await client.post("/v1/chat/completions", json=chat(max_tokens=2000))
        assert r.status_code == 200, r.text
        lowered = int(r.headers[LOWERED_HEADER])
        assert 450 < lowered < 500 and upstream.requests[-1].bound == lowered


@asynccontextmanager
async def json_for_a_stream() -> AsyncIterator[str]:
    """An upstream that answers a streamed request with a plain JSON completion (200)."""
    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({
            "id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 15, "completion_tokens": 8, "total_tokens": 23}})

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        await runner.cleanup()


async def test_a_stream_answered_with_a_json_body_is_a_502_billed_what_it_reports(gateway_for):
    async with json_for_a_stream() as url:
        cfg = base_config([upstream_model(MODEL, url)], router={"backoff_base": 0.001, "retries": 0})
        policies, settled = recording_policies(cfg)
        async with gateway_for(cfg, policies=policies) as client:
            r = await client.post("/v1/chat/completions", json=chat(stream=True, max_tokens=50))
            await client.app.state.gateway.drain()  # type: ignore[attr-defined]
    assert r.status_code == 502, r.text
    assert json.loads(r.text)["error"]["type"]
    assert [(s.usage.prompt_tokens, s.usage.completion_tokens) for s in settled] == [(15, 8)]


async def test_a_request_without_a_bound_gets_the_models_max_output_tokens(upstream, gateway_for):
    """Issue 28 item 10: max_output_tokens is also the bound sent and reserved when the caller
    gives none (Codex names none); before, it could only lower the default 4096."""
    upstream.default = Behaviour(text="short answer")
    limit = 1_000_000
    cfg = base_config([{**upstream_model(MODEL, upstream.url), "max_output_tokens": 16000}],
                      keys=[{"id": "k1", "team": "t", "key": KEY, "limits": {"tpm": limit}}])
    async with gateway_for(cfg) as client:
        r = await client.post("/v1/chat/completions", json=chat())
        assert r.status_code == 200, r.text
        assert upstream.requests[-1].bound == 16000
        # reserved as that: prompt (a few tokens) + 16000 taken from the minute's tokens at admission
        remaining = int(r.headers["x-ratelimit-remaining-tokens"])
        assert limit - 16000 - 50 < remaining < limit - 16000
        r = await client.post("/v1/responses", json={"model": MODEL, "input": "hi"})
        assert r.status_code == 200, r.text
        assert upstream.requests[-1].bound == 16000
        # The caller's own bound still goes as asked.
        await client.post("/v1/chat/completions", json=chat(max_tokens=9))
        assert upstream.requests[-1].bound == 9
