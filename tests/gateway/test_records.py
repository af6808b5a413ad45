"""A request's usage record says what happened to it, each field under its own name (the gateway
builds the settlement's outcome by position: a field out of place would file one value under
another's name)."""

from __future__ import annotations

from typing import Any

from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import MASTER, base_config, serve, upstream_model

MODEL = "v/m"


async def records(client: Any) -> list[dict[str, Any]]:
    r = await client.get("/admin/usage/records", params={"team": "t"},
                         headers={"authorization": f"Bearer {MASTER}"})
    assert r.status_code == 200, r.text
    return r.json()["data"]


async def test_each_field_of_the_record_is_its_own(upstream) -> None:
    upstream.default = Behaviour(pieces=["one ", "two ", "three"], chunk_delay=0.05)
    async with serve(base_config([upstream_model(MODEL, upstream.url)])) as client:
        r = await client.post("/v1/chat/completions", headers={"x-request-id": "rid-1"},
                              json={"model": f"{MODEL}/d1", "stream": True,
                                    "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200 and "[DONE]" in r.text
        upstream.default = Behaviour(status=400, error="no such thing")
        r = await client.post("/v1/completions", headers={"x-request-id": "rid-2"},
                              json={"model": MODEL, "prompt": "hi"})
        assert r.status_code == 400
        recs = {rec["request_id"]: rec for rec in await records(client)}
    ok, bad = recs["rid-1"], recs["rid-2"]
    assert (ok["endpoint"], ok["dialect"], ok["model"], ok["requested_model"], ok["deployment"]) == (
        "/v1/chat/completions", "chat", MODEL, f"{MODEL}/d1", f"{MODEL}/d1")
    assert (ok["status"], ok["attempts"], ok["cut"], ok["reason"], ok["guardrails"], ok["cache_hit"]) == (
        200, 1, False, "", "", False)
    assert ok["completion_tokens"] == 3 and ok["prompt_tokens"] > 0
    # The first piece went out at once; the answer took two more pieces' delays.
    assert ok["ttfb_ms"] > 0 and ok["latency_ms"] >= ok["ttfb_ms"] + 90
    assert (bad["endpoint"], bad["requested_model"], bad["status"], bad["attempts"]) == (
        "/v1/completions", MODEL, 400, 1)
    assert (bad["reason"], bad["dialect"], bad["cut"]) == ("upstream:400", "openai", False)
