"""Fallback groups and the context-window fallback."""

from __future__ import annotations

import pytest

from tests.fakes.upstream import Behaviour, refused_url
from tests.gateway.conftest import serve
from tests.routing.conftest import completion, config, dep, group, records


async def test_fallbacks_in_order_after_the_group_is_exhausted(upstreams):
    a, b, c = upstreams
    a.default = b.default = Behaviour(status=503)
    cfg = config(group("m/x", dep("a", a.url), fallbacks=["m/y", "m/z"]),
                 group("m/y", dep("b", b.url)), group("m/z", dep("c", c.url)), router={"retries": 1})
    async with serve(cfg) as client:
        r = await client.post("/v1/completions", json=completion("m/x"))
        recs = await records(client)
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-deployment"] == "m/z/c"
    assert r.headers["x-switchyard-fallback"] == "m/z"
    assert r.headers["x-switchyard-attempts"] == "5"  # 2 on m/x, 2 on m/y, 1 on m/z
    assert (len(a.requests), len(b.requests), len(c.requests)) == (2, 2, 1)
    assert r.json()["model"] == "m/x"  # the caller's name, whoever served
    assert [(x.model, x.deployment) for x in recs] == [("m/x", "m/z/c")]


async def test_no_fallback_header_when_the_group_served(upstreams):
    a, b = upstreams[0], upstreams[1]
    cfg = config(group("m/x", dep("a", a.url), fallbacks=["m/y"]), group("m/y", dep("b", b.url)))
    async with serve(cfg) as client:
        r = await client.post("/v1/completions", json=completion("m/x"))
    assert r.status_code == 200 and "x-switchyard-fallback" not in r.headers


async def test_caller_errors_do_not_fall_back(upstreams):
    a, b = upstreams[0], upstreams[1]
    a.default = Behaviour(status=422, error="nope")
    cfg = config(group("m/x", dep("a", a.url), fallbacks=["m/y"]), group("m/y", dep("b", b.url)))
    async with serve(cfg) as client:
        r = await client.post("/v1/completions", json=completion("m/x"))
    assert r.status_code == 422 and len(b.requests) == 0


async def test_pinned_deployment_does_not_fall_back():
    cfg = config(group("m/x", dep("a", refused_url()), fallbacks=["m/y"]),
                 group("m/y", dep("b", refused_url())), router={"retries": 0})
    async with serve(cfg) as client:
        r = await client.post("/v1/completions", json=completion("m/x/a"))
    assert r.status_code == 502 and r.headers["x-switchyard-attempts"] == "1"


async def test_prompt_too_long_goes_straight_to_the_context_fallback(upstreams):
    small, big = upstreams[0], upstreams[1]
    cfg = config(group("m/small", dep("s", small.url), context_window=50, context_fallback="m/big",
                       tokenizer="cl100k_base"),
                 group("m/big", dep("b", big.url), context_window=10_000, tokenizer="cl100k_base"))
    async with serve(cfg) as client:
        fits = await client.post("/v1/completions", json=completion("m/small", max_tokens=10))
        long = await client.post("/v1/completions", json=completion("m/small", max_tokens=100))
    assert fits.headers["x-switchyard-deployment"] == "m/small/s"
    assert long.status_code == 200
    assert long.headers["x-switchyard-deployment"] == "m/big/b"
    assert long.headers["x-switchyard-fallback"] == "m/big"
    assert long.headers["x-switchyard-attempts"] == "1"
    assert len(small.requests) == 1


async def test_prompt_too_long_without_context_fallback_is_400_with_the_numbers(upstreams):
    up = upstreams[0]
    cfg = config(group("m/small", dep("s", up.url), context_window=50, tokenizer="cl100k_base"))
    async with serve(cfg) as client:
        r = await client.post("/v1/chat/completions", json={
            "model": "m/small", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400  # (the chat dialect renders InvalidRequest as a plain 400)
    msg = r.json()["error"]["message"]
    assert "context window of 50 tokens" in msg and "100 for the completion" in msg
    assert len(up.requests) == 0


async def test_fallbacks_that_cannot_hold_the_prompt_are_skipped(upstreams):
    a, b, c = upstreams
    a.default = Behaviour(status=500)
    cfg = config(group("m/x", dep("a", a.url), fallbacks=["m/tiny", "m/y"], context_window=1000,
                       tokenizer="cl100k_base"),
                 group("m/tiny", dep("b", b.url), context_window=20, tokenizer="cl100k_base"),
                 group("m/y", dep("c", c.url)), router={"retries": 0})
    async with serve(cfg) as client:
        r = await client.post("/v1/completions", json=completion("m/x", max_tokens=100))
    assert r.headers["x-switchyard-deployment"] == "m/y/c"
    assert len(b.requests) == 0


async def test_a_fallback_may_be_a_name_a_pattern_alias_or_a_vendor_route_matches(upstreams):
    a, b, c = upstreams
    a.default = Behaviour(status=503)
    cfg = config(group("m/x", dep("a", a.url), fallbacks=["claude-haiku", "openai/gpt-4o-mini"]),
                 group("m/y", dep("b", b.url), aliases=["claude-*"]), group("openai/*", dep("c", c.url)),
                 router={"retries": 0})
    async with serve(cfg) as client:
        r = await client.post("/v1/completions", json=completion("m/x"))
        assert r.status_code == 200, r.text
        assert r.headers["x-switchyard-deployment"] == "m/y/b"
        b.default = Behaviour(status=503)
        r = await client.post("/v1/completions", json=completion("m/x"))
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-fallback"] == "openai/gpt-4o-mini"
    assert c.requests[-1].body["model"] == "gpt-4o-mini"


def test_a_fallback_that_is_itself_a_pattern_is_a_config_error():
    from switchyard.core.settings import ConfigError
    from switchyard.routing.router import Router

    with pytest.raises(ConfigError, match="fallback 'claude-\\*' is a pattern"):
        Router(config(group("m/x", dep("a", "http://127.0.0.1:9"), fallbacks=["claude-*"]),
                      group("m/y", dep("b", "http://127.0.0.1:9"), aliases=["claude-*"])))
    with pytest.raises(ConfigError, match="fallback 'gpt-4o' is not a configured model"):
        Router(config(group("m/x", dep("a", "http://127.0.0.1:9"), fallbacks=["gpt-4o"]),
                      group("m/y", dep("b", "http://127.0.0.1:9"), aliases=["claude-*"])))
