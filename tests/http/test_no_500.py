"""Nothing answers a plain 500 on a completion path: a malformed content part is a 400 naming the
field, and a bug answers the caller's JSON error shape with the request id, its cause logged (the
stack in the log, never in the body)."""

from __future__ import annotations

import logging

import pytest

import switchyard.gateway.pipeline as pipeline
from tests.gateway.conftest import KEY, base_config, upstream_model
from tests.gateway.helpers import recording_policies

MODEL = "v/m"


@pytest.mark.parametrize("text", [1, False, ["a"], {}, None])
async def test_a_content_part_whose_text_is_not_a_string_is_a_400_naming_it(upstream, gateway_for, text):
    async with gateway_for(base_config([upstream_model(MODEL, upstream.url)])) as client:
        r = await client.post("/v1/chat/completions", headers={"x-request-id": "rid-1"}, json={
            "model": MODEL, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "fine"}, {"type": "text", "text": text}]}]})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "messages[0].content[1].text" and "must be a string" in err["message"]
    assert r.headers["x-request-id"] == "rid-1"
    assert not upstream.requests


async def test_content_that_is_neither_text_nor_parts_is_a_400(upstream, gateway_for):
    async with gateway_for(base_config([upstream_model(MODEL, upstream.url)])) as client:
        for content, param in ((5, "messages[0].content"), ([7], "messages[0].content[0]")):
            r = await client.post("/v1/chat/completions", json={
                "model": MODEL, "messages": [{"role": "user", "content": content}]})
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


async def test_a_bug_before_the_call_answers_the_callers_shape_and_is_logged(upstream, gateway_for,
                                                                             monkeypatch, caplog):
    def broken(*a: object, **kw: object) -> int:
        raise RuntimeError("secret-internal-detail")

    monkeypatch.setattr(pipeline, "count_prompt_tokens", broken)
    cfg = base_config([upstream_model(MODEL, upstream.url)])
    caplog.set_level(logging.ERROR, logger="switchyard")
    async with gateway_for(cfg) as client:
        r = await client.post("/v1/chat/completions", headers={"x-request-id": "rid-bug"},
                              json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
        c = await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi"})
    assert r.status_code == 500 and r.headers["content-type"].startswith("application/json")
    assert r.json()["error"]["type"] == "server_error" and r.headers["x-request-id"] == "rid-bug"
    assert "secret-internal-detail" not in r.text and "Traceback" not in r.text
    assert c.status_code == 500 and c.json()["error"]["type"] == "server_error"
    logged = [rec for rec in caplog.records if "rid-bug" in rec.getMessage()]
    assert logged and logged[0].exc_info is not None
    assert "secret-internal-detail" in str(logged[0].exc_info[1])


async def test_a_bug_after_admission_still_gives_the_reservation_back(upstream, gateway_for, monkeypatch):
    def broken(*a: object, **kw: object) -> str:
        raise RuntimeError("boom")

    cfg = base_config([upstream_model(MODEL, upstream.url)],
                      keys=[{"id": "k1", "team": "t", "key": KEY, "limits": {"max_concurrency": 1}}])
    policies, settled = recording_policies(cfg)
    async with gateway_for(cfg, policies=policies) as client:
        monkeypatch.setattr(pipeline, "unsent_warning", broken)
        r = await client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.status_code == 500
        monkeypatch.undo()
        r = await client.post("/v1/chat/completions", json={  # the one slot is free again
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.status_code == 200, r.text
    assert settled[0].status == 500 and settled[0].usage.total_tokens == 0
