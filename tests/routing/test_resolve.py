"""Names to routes: groups, aliases, pinned deployments, wildcards, per-key defaults, ``default``."""

from __future__ import annotations

import pytest

from switchyard.core.errors import NotFound
from switchyard.core.settings import ConfigError
from switchyard.routing import Router
from tests.gateway.conftest import serve
from tests.routing.conftest import completion, config, dep, group

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


def test_default_is_the_only_model_of_the_requests_kind():
    """config.example.yaml serves a text model and an embedding model: a request naming no model
    (llama.cpp's /completion) means the text one, as llama-server would answer; an embedding
    request the embedding one. Before, two models meant no default at all (a 404)."""
    r = Router(config(group("local/smollm2", dep("a", URL)),
                      group("local/minilm", dep("e", URL), mode="embedding"),
                      group("openai/*", dep("w", URL))))
    assert r.resolve("default").group == "local/smollm2"
    assert r.default("completion").group == "local/smollm2" and r.default("chat").group == "local/smollm2"
    assert r.default("embedding").group == "local/minilm"
    two = Router(config(group("m/x", dep("a", URL)), group("m/y", dep("a", URL))))
    with pytest.raises(NotFound, match=r"name one in `model` \(2 chat models are configured \(m/x, m/y\)\)"):
        two.default("completion")
    with pytest.raises(NotFound, match="no embedding model is configured"):
        two.default("embedding")


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


# --- Fireworks' own names as an alias pattern ------------------------------------------------------

FW = "accounts/fireworks/models/*"


def test_fireworks_alias_pattern_resolves_as_the_vendor_route():
    r = Router(config(group("fireworks/*", dep("a", URL, dialect="fireworks"), aliases=[FW]),
                      group("fireworks/kimi", dep("b", URL, dialect="fireworks"),
                            aliases=["accounts/fireworks/models/kimi"])))
    route = r.resolve("accounts/fireworks/models/llama-v3p1-8b")
    assert route.group == "fireworks/llama-v3p1-8b"  # limits, usage and allow-lists see this name
    assert route.upstream_model == "accounts/fireworks/models/llama-v3p1-8b"  # Fireworks' own name
    assert r.resolve("accounts/fireworks/models/kimi").group == "fireworks/kimi"  # an exact alias wins
    with pytest.raises(NotFound):
        r.resolve("accounts/fireworks/models/")
    with pytest.raises(NotFound):
        r.resolve("accounts/other/models/x")


@pytest.mark.parametrize(("model", "why"), [
    (group("fireworks/*", dep("a", URL, dialect="openai"), aliases=[FW]), "fireworks-dialect"),
    (group("fireworks/x", dep("a", URL, dialect="fireworks"), aliases=["*"]), "matches every name"),
    (group("fireworks/*", dep("a", URL, dialect="fireworks"), aliases=["accounts/*/models/*"]), "no other"),
    (group("fireworks/*", dep("a", URL, dialect="fireworks"), aliases=["accounts/fireworks*"]), "end in /"),
])
def test_alias_patterns_only_where_they_mean_something(model, why):
    with pytest.raises(ConfigError, match=why):
        config(model)


async def test_allow_lists_check_the_resolved_name_so_aliases_never_escape(upstreams):
    up = upstreams[0]
    keys = [{"id": "fw", "team": "t", "key": "sk-fw", "models": ["fireworks/*"]},
            {"id": "mx", "team": "t", "key": "sk-mx", "models": ["m/x"]}]
    groups = (group("fireworks/*", dep("a", up.url, dialect="fireworks"), aliases=[FW]),
              group("m/x", dep("b", up.url), aliases=["fast"]))
    # An allow-list of an alias or an alias pattern would admit nothing: refused when loading.
    for listed, why in ((["fast"], "is an alias"), (["accounts/*"], "not a configured model")):
        with pytest.raises(ConfigError, match=why):
            config(*groups, keys=[*keys, {"id": "alias-only", "team": "t", "key": "sk-alias",
                                          "models": listed}])
    cfg = config(*groups, keys=keys)
    fw_name = "accounts/fireworks/models/llama"
    async with serve(cfg) as client:
        def as_key(key: str, model: str):  # type: ignore[no-untyped-def]
            return client.post("/inference/v1/completions", json=completion(model),
                               headers={"authorization": f"Bearer {key}"})
        fw = await as_key("sk-fw", fw_name)
        mx_by_alias = await as_key("sk-mx", "fast")
        other = await as_key("sk-mx", fw_name)
    assert fw.status_code == 200, fw.text
    assert fw.json()["model"] == fw_name and up.requests[0].body["model"] == fw_name
    assert mx_by_alias.status_code == 200, mx_by_alias.text
    assert other.status_code == 403, other.text
    assert len(up.requests) == 2


async def test_a_wildcard_remainder_never_escapes_an_allow_list(upstreams):
    """A key allowed only ``wild/allowed`` reaches exactly the upstream model ``allowed``: not
    ``allowed/../other`` (a path-like remainder is a 400 for anyone), not ``allowed/other``
    (another upstream model, though its first two segments read like a pinned deployment)."""
    up = upstreams[0]
    keys = [{"id": "narrow", "team": "t", "key": "sk-narrow", "models": ["wild/allowed"]},
            {"id": "wide", "team": "t", "key": "sk-wide", "models": ["wild/*"]}]
    cfg = config(group("wild/*", dep("a", up.url)), keys=keys)
    async with serve(cfg) as client:
        def as_key(key: str, model: str):  # type: ignore[no-untyped-def]
            return client.post("/v1/completions", json=completion(model),
                               headers={"authorization": f"Bearer {key}"})
        ok = await as_key("sk-narrow", "wild/allowed")
        traversal = [await as_key(k, m) for k in ("sk-narrow", "sk-wide")
                     for m in ("wild/allowed/../other", "wild/./x", "wild/a//b", "wild/a/..")]
        longer = await as_key("sk-narrow", "wild/allowed/other")
    assert ok.status_code == 200, ok.text
    for r in traversal:
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "model"
    assert longer.status_code == 403, longer.text
    assert [r.body["model"] for r in up.requests] == ["allowed"]


# --- pattern aliases (claude-*) -------------------------------------------------------------------


def test_a_pattern_alias_routes_every_name_it_matches_exact_names_first_then_config_order():
    """Issue 28 item 11: Claude Code 2.1.332 asks for claude-opus-5-5 when given no --model."""
    r = Router(config(group("a/haiku", dep("h", URL), aliases=["claude-haiku-4-5", "claude-*-haiku*"]),
                      group("a/opus", dep("o", URL), aliases=["claude-*"]),
                      group("a/later", dep("l", URL), aliases=["claude-opus-*"])))
    assert r.resolve("claude-opus-5-5").group == "a/opus"  # the first pattern that matches
    assert r.resolve("claude-3-5-haiku-latest").group == "a/haiku"  # config order, not specificity
    assert r.resolve("claude-haiku-4-5").group == "a/haiku"  # an exact alias wins
    assert r.resolve("a/later").group == "a/later"
    route = r.resolve("claude-opus-5-5")
    assert route.pattern == "claude-*" and route.upstream_model is None
    # One route per pattern, none kept per name: callers' names cannot grow the resolver.
    assert r.resolve("claude-sonnet-9") is route and "claude-opus-5-5" not in r.resolver._routes
    with pytest.raises(NotFound):
        r.resolve("gpt-4o")
    # Patterns are fnmatch's and match whole names, case-sensitively.
    with pytest.raises(NotFound):
        r.resolve("Claude-opus")
    with pytest.raises(ConfigError, match="matches every name"):
        config(group("a/any", dep("x", URL), aliases=["*"]))


async def test_claude_codes_default_model_reaches_the_pattern_route(upstreams):
    up = upstreams[0]
    async with serve(config(group("a/sonnet", dep("s", up.url, model="upstream-sonnet"),
                                  aliases=["claude-*"]))) as client:
        r = await client.post("/v1/messages", json={"model": "claude-opus-5-5", "max_tokens": 5,
                                                     "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "claude-opus-5-5"  # answered by the name asked for
    assert up.requests[0].body["model"] == "upstream-sonnet"
