"""Edges of the request path: naming a dialect, the unnamed model, hints an upstream can't take."""

from __future__ import annotations

from tests.gateway.conftest import base_config, upstream_model


async def test_unknown_dialect_header_is_a_400_naming_the_choices(upstream, gateway_for) -> None:
    async with gateway_for(base_config([upstream_model("v/m", upstream.url)])) as client:
        r = await client.post("/v1/completions", json={"model": "v/m", "prompt": "hi"},
                              headers={"x-switchyard-dialect": "klingon"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "x-switchyard-dialect"
    assert "klingon" in err["message"] and "llamacpp" in err["message"]
    assert upstream.requests == []


async def test_named_dialect_header_selects_the_table(upstream, gateway_for) -> None:
    async with gateway_for(base_config([upstream_model("v/m", upstream.url, dialect="llamacpp")])) as client:
        r = await client.post("/v1/completions", json={"model": "v/m", "prompt": "hi", "max_tokens": 2,
                                                       "repeat_penalty": 1.3},
                              headers={"x-switchyard-dialect": "llamacpp"})
    assert r.status_code == 200, r.text
    assert upstream.requests[0].body["repeat_penalty"] == 1.3


async def test_native_completion_without_model_answers_with_the_served_model(upstream, gateway_for) -> None:
    cfg = base_config([upstream_model("v/only", upstream.url, dialect="llamacpp")])
    async with gateway_for(cfg) as client:
        r = await client.post("/completion", json={"prompt": "hi", "n_predict": 2})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "v/only"
    assert r.json()["content"] == "w0 w1"


async def test_cache_prompt_hint_is_dropped_where_it_cannot_go(upstream, gateway_for) -> None:
    async with gateway_for(base_config([upstream_model("v/m", upstream.url, dialect="openai")])) as client:
        r = await client.post("/v1/completions", json={"model": "v/m", "prompt": "hi", "max_tokens": 2,
                                                       "cache_prompt": True, "n_predict": 2})
    assert r.status_code == 200, r.text
    assert "cache_prompt" not in upstream.requests[0].body
