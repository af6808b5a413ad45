"""Names to routes: groups, aliases, pinned deployments, wildcards, per-key defaults, ``default``."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError
from gateway.errors import NotFound
from gateway.routing import Router
from tests.gateway.conftest import serve
from tests.router.conftest import completion, config, dep, group

URL = "http://127.0.0.1:9/v1"


def test_groups_aliases_and_pins():
    r = Router(config(group("m/x", dep("a", URL), dep("b", URL), aliases=["fast"])))
    assert r.resolve("m/x").group == "m/x" and len(r.resolve("m/x").targets) == 2
    assert r.resolve("fast").group == "m/x"
    pinned = r.resolve("m/x/b")
    assert pinned.pinned and [t.deployment.name for t in pinned.targets] == ["b"]
    with pytest.raises(NotFound, match="no deployment 'c'"):
        r.resolve("m/x/c")
    with pytest.raises(NotFound):
        r.resolve("m/y")
    assert r.resolve("m/x") is r.resolve("m/x")  # built once


def test_wildcard_passes_the_name_through():
    r = Router(config(group("openai/*", dep("a", URL))))
    route = r.resolve("openai/gpt-4o-mini")
    assert route.group == "openai/gpt-4o-mini" and route.upstream_model == "gpt-4o-mini"
    with pytest.raises(NotFound):
        r.resolve("anthropic/claude")


def test_default_is_the_only_model():
    assert Router(config(group("m/x", dep("a", URL)))).resolve("default").group == "m/x"
    with pytest.raises(NotFound):
        Router(config(group("m/x", dep("a", URL)), group("m/y", dep("a", URL)))).resolve("default")


def test_unknown_fallback_is_a_config_error():
    with pytest.raises(ConfigError, match="m/nope"):
        Router(config(group("m/x", dep("a", URL), fallbacks=["m/nope"])))
    with pytest.raises(ConfigError, match="m/big"):
        Router(config(group("m/x", dep("a", URL), context_fallback="m/big")))


async def test_wildcard_and_key_default_through_the_gateway(upstreams):
    a, b = upstreams[0], upstreams[1]
    cfg = config(group("openai/*", dep("a", a.url)), group("m/x", dep("b", b.url)),
                 keys=[{"id": "k1", "team": "t", "key": "sk-test-key", "default_model": "m/x"}])
    async with serve(cfg) as client:
        w = await client.post("/v1/completions", json=completion("openai/gpt-4o-mini"))
        d = await client.post("/v1/completions", json=completion("default"))
    assert w.status_code == 200 and a.requests[0].body["model"] == "gpt-4o-mini"
    assert w.json()["model"] == "openai/gpt-4o-mini"
    assert d.status_code == 200 and d.headers["x-switchyard-deployment"] == "m/x/b"


async def test_pinned_deployment_gets_every_request(upstreams):
    a, b = upstreams[0], upstreams[1]
    async with serve(config(group("m/x", dep("a", a.url), dep("b", b.url)))) as client:
        for _ in range(5):
            r = await client.post("/v1/completions", json=completion("m/x/b"))
            assert r.headers["x-switchyard-deployment"] == "m/x/b"
    assert len(a.requests) == 0 and len(b.requests) == 5
