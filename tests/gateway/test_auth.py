"""Keys, permissions, limits on the body, and the informational endpoints."""

from __future__ import annotations

import logging

import pytest

from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import KEY, base_config, upstream_model

WRONG = "sk-wrong-secret-0f9e8d"
COMPLETION = {"model": "v/m", "prompt": "hi", "max_tokens": 2}
CHAT = {"model": "v/m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def two_models(url: str, **extra):
    return base_config([upstream_model("v/m", url), upstream_model("v/other", url)], **extra)


def restricted(url: str):
    """Team t may use v/m only; key k2 (team t) further only v/nothing."""
    return two_models(url, teams=[{"name": "t", "models": ["v/m"]}],
                      keys=[{"id": "k1", "team": "t", "key": KEY},
                            {"id": "k2", "team": "t", "key": "sk-narrow", "models": ["v/other"]}])


async def test_bearer_and_x_api_key_both_work(upstream, gateway_for) -> None:
    async with gateway_for(two_models(upstream.url)) as client:
        a = await client.post("/v1/completions", json=COMPLETION)
        b = await client.post("/v1/completions", json=COMPLETION,
                              headers={"authorization": "", "x-api-key": KEY})
    assert a.status_code == 200 and b.status_code == 200


MESSAGES = {"model": "v/m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(("path", "body", "shape"), [("/v1/chat/completions", CHAT, "openai"),
                                                     ("/v1/messages", MESSAGES, "anthropic")])
async def test_two_different_keys_in_x_api_key_and_bearer_are_a_400_naming_both(
        upstream, gateway_for, caplog, path, body, shape) -> None:
    """The Bearer key was used silently: whose key is charged must not be the gateway's guess."""
    caplog.set_level(logging.DEBUG)
    async with gateway_for(two_models(upstream.url)) as client:
        both = await client.post(path, json=body, headers={"x-api-key": WRONG})  # Bearer KEY as well
        flipped = await client.post(path, json=body, headers={"authorization": f"Bearer {WRONG}",
                                                              "x-api-key": KEY})
        same = await client.post(path, json=body, headers={"x-api-key": KEY})
    for r in (both, flipped):
        assert r.status_code == 400, r.text
        j = r.json()
        if shape == "anthropic":
            assert j["type"] == "error" and j["error"]["type"] == "invalid_request_error"
        else:
            assert j["error"]["type"] == "invalid_request_error" and j["error"]["param"] == "x-api-key"
        assert "x-api-key" in j["error"]["message"] and "Authorization: Bearer" in j["error"]["message"]
        assert WRONG not in r.text and KEY not in r.text
    assert same.status_code == 200, same.text
    assert len(upstream.requests) == 1  # the refused ones reached no model
    assert WRONG not in caplog.text and KEY not in caplog.text


PATHS = [("/v1/completions", COMPLETION, "openai"), ("/v4/beta/completions", COMPLETION, "sgp"),
         ("/completion", COMPLETION, "llamacpp"), ("/v1/chat/completions", CHAT, "chat"),
         ("/inference/v1/completions", COMPLETION, "fireworks")]


@pytest.mark.parametrize(("path", "body", "shape"), PATHS, ids=[p[2] for p in PATHS])
async def test_missing_or_unknown_key_is_401_without_the_key(upstream, gateway_for, caplog, capsys,
                                                             path, body, shape) -> None:
    caplog.set_level(logging.DEBUG)
    async with gateway_for(two_models(upstream.url)) as client:
        missing = await client.post(path, json=body, headers={"authorization": ""})
        wrong = await client.post(path, json=body, headers={"authorization": f"Bearer {WRONG}"})
        wrong_x = await client.post(path, json=body, headers={"authorization": "", "x-api-key": WRONG})
        basic = await client.post(path, json=body, headers={"authorization": f"Basic {WRONG}"})
    for r in (missing, wrong, wrong_x, basic):
        assert r.status_code == 401, r.text
        err = r.json()["error"]
        assert err["type"] == "authentication_error"
        assert (err["code"] == 401) if shape == "llamacpp" else (err["code"] == "invalid_api_key")
        assert WRONG not in r.text
    assert "missing" in missing.json()["error"]["message"]
    out = capsys.readouterr()
    assert WRONG not in caplog.text and WRONG not in out.out and WRONG not in out.err
    assert upstream.requests == []


async def test_no_key_in_errors_or_logs_on_success_or_failure(upstream, gateway_for, caplog, capsys) -> None:
    caplog.set_level(logging.DEBUG)
    upstream.script.append(Behaviour(status=500))
    cfg = two_models(upstream.url, router={"retries": 0})
    async with gateway_for(cfg) as client:
        ok = await client.post("/v1/completions", json=COMPLETION)
        bad = await client.post("/v1/completions", json={**COMPLETION, "temperature": 9})
        forbidden = await client.post("/v1/completions", json={**COMPLETION, "model": "v/none"})
    assert ok.status_code == 502 and bad.status_code == 400 and forbidden.status_code == 404
    out = capsys.readouterr()
    for text in (ok.text, bad.text, forbidden.text, caplog.text, out.out, out.err):
        assert KEY not in text


async def test_team_and_key_allowlists_are_403(upstream, gateway_for) -> None:
    async with gateway_for(restricted(upstream.url)) as client:
        ok = await client.post("/v1/completions", json=COMPLETION)
        team_no = await client.post("/v1/completions", json={**COMPLETION, "model": "v/other"})
        key_no = await client.post("/v1/chat/completions", json=CHAT,
                                   headers={"authorization": "Bearer sk-narrow"})
        sgp_no = await client.post("/v4/beta/completions", json={**COMPLETION, "model": "v/other"})
    assert ok.status_code == 200
    for r in (team_no, key_no):
        assert r.status_code == 403, r.text
        assert r.json()["error"]["type"] == "permission_error"
        assert r.json()["error"]["param"] == "model"
    assert sgp_no.status_code == 403 and "v/other" in sgp_no.json()["error"]["message"]
    assert "sk-narrow" not in key_no.text
    assert len(upstream.requests) == 1


async def test_unknown_model_is_404(upstream, gateway_for) -> None:
    async with gateway_for(two_models(upstream.url)) as client:
        r = await client.post("/v1/completions", json={**COMPLETION, "model": "v/nope"})
    assert r.status_code == 404 and "v/nope" in r.json()["error"]["message"]


async def test_body_over_the_limit_is_413(upstream, gateway_for) -> None:
    cfg = two_models(upstream.url, server={"max_body_bytes": 1024})
    async with gateway_for(cfg) as client:
        big = await client.post("/v1/completions", json={**COMPLETION, "prompt": "x" * 5000})
        big_sgp = await client.post("/v4/beta/completions", json={**COMPLETION, "prompt": "x" * 5000})
        small = await client.post("/v1/completions", json=COMPLETION)
    assert big.status_code == 413 and big_sgp.status_code == 413
    assert "1024" in big.json()["error"]["message"]
    assert small.status_code == 200
    assert len(upstream.requests) == 1


async def test_models_lists_only_what_the_key_may_use(upstream, gateway_for) -> None:
    cfg = base_config([upstream_model("v/m", upstream.url), upstream_model("v/other", upstream.url),
                       upstream_model("w/*", upstream.url)],
                      teams=[{"name": "t", "models": ["v/m", "w/*"]}, {"name": "u"}],
                      keys=[{"id": "k1", "team": "t", "key": KEY},
                            {"id": "k2", "team": "u", "key": "sk-all"}])
    async with gateway_for(cfg) as client:
        mine = await client.get("/v1/models")
        everything = await client.get("/v1/models", headers={"authorization": "Bearer sk-all"})
        anon = await client.get("/v1/models", headers={"authorization": ""})
    assert mine.status_code == 200
    assert mine.json()["object"] == "list"
    assert [m["id"] for m in mine.json()["data"]] == ["v/m"]
    assert sorted(m["id"] for m in everything.json()["data"]) == ["v/m", "v/other"]
    assert all(m["object"] == "model" for m in everything.json()["data"])
    assert anon.status_code == 401


async def test_health_ready_and_schema(upstream, gateway_for) -> None:
    async with gateway_for(two_models(upstream.url)) as client:
        health = await client.get("/health", headers={"authorization": ""})
        ready = await client.get("/ready", headers={"authorization": ""})
        schema = await client.get("/schema/openapi.json", headers={"authorization": ""})
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for p in ("/v1/completions", "/v1/chat/completions", "/v4/beta/completions", "/completion",
              "/inference/v1/completions", "/v1/models"):
        assert p in paths, sorted(paths)


async def test_ready_is_503_while_a_backend_loads(upstream, gateway_for) -> None:
    from switchyard.routing import Router

    cfg = two_models(upstream.url)
    router = Router(cfg)

    class Loading:
        ready = False
        load_error = None

        async def start(self) -> None: ...

        async def aclose(self) -> None: ...

    router_targets = router.targets
    router_targets[0].backend = Loading()  # type: ignore[assignment]
    async with gateway_for(cfg, router=router) as client:
        r = await client.get("/ready")
    assert r.status_code == 503 and r.json()["status"] == "not ready"
    assert "model is loading" in r.json()["message"]


async def test_unknown_path_is_404_json(upstream, gateway_for) -> None:
    async with gateway_for(two_models(upstream.url)) as client:
        r = await client.post("/v2/whatever", json={})
    assert r.status_code == 404
    assert isinstance(r.json(), dict)

