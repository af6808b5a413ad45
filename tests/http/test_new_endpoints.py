"""``/v1/responses`` and ``/v1/embeddings`` count like the other endpoints: ``/metrics`` (requests,
tokens, spend by endpoint and dialect), the access log line, the console's usage feed, and the
OpenAPI document (their fields from the dialect tables)."""

from __future__ import annotations

import json

from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import MASTER, base_config, serve, upstream_model
from tests.http.test_metrics import scrape, value

MODEL = "v/m"


def config(url: str):  # type: ignore[no-untyped-def]
    priced = {**upstream_model(MODEL, url), "price": {"prompt_per_1m": 1.0, "completion_per_1m": 2.0}}
    return base_config([priced], logging={"access": True})


async def test_metrics_access_log_and_usage_records(upstream, capsys) -> None:
    upstream.default = Behaviour(text="a b c")
    async with serve(config(upstream.url)) as client:
        r = await client.post("/v1/responses", json={"model": MODEL, "input": "hi"})
        assert r.status_code == 200, r.text
        r = await client.post("/v1/responses", json={"model": MODEL, "input": "hi", "stream": True})
        assert r.status_code == 200 and "response.completed" in r.text
        r = await client.post("/v1/embeddings", json={"model": MODEL, "input": ["one two", "three"]})
        assert r.status_code == 200, r.text
        r = await client.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True})
        assert r.status_code == 400
        m = await scrape(client)
        records = (await client.get("/admin/usage/records", params={"team": "t"},
                                    headers={"authorization": f"Bearer {MASTER}"})).json()["data"]
    ok = dict(model=MODEL, deployment=f"{MODEL}/d1", team="t", status_class="2xx")
    assert value(m, "switchyard_requests_total", **ok, endpoint="/v1/responses", dialect="responses") == 2
    assert value(m, "switchyard_requests_total", **ok, endpoint="/v1/embeddings", dialect="embeddings") == 1
    assert value(m, "switchyard_requests_total", endpoint="/v1/responses", status_class="4xx") == 1
    assert value(m, "switchyard_tokens_total", model=MODEL, kind="completion") == 3 + 3
    assert value(m, "switchyard_spend_usd_total", model=MODEL) > 0
    # The usage records (what the console reads): one per request; the embedding's
    # usage as the upstream counted it.
    by_endpoint = {}
    for rec in records:
        by_endpoint.setdefault(rec["endpoint"], []).append(rec)
    assert sorted(r["status"] for r in by_endpoint["/v1/responses"]) == [200, 200, 400]  # refusals too
    (emb,) = by_endpoint["/v1/embeddings"]
    assert emb["prompt_tokens"] == 3 and emb["completion_tokens"] == 0 and emb["status"] == 200
    # One access line each, with the endpoint, dialect and tokens.
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    access = [r for r in lines if r.get("event") == "request" and r["endpoint"].startswith("/v1/")]
    assert [(r["endpoint"], r["status"]) for r in access] == [
        ("/v1/responses", 200), ("/v1/responses", 200), ("/v1/embeddings", 200), ("/v1/responses", 400)]
    assert access[2]["dialect"] == "embeddings" and access[2]["prompt_tokens"] == 3
    assert access[1]["stream"] is True and access[1]["completion_tokens"] == 3


async def test_openapi_documents_them(upstream) -> None:
    async with serve(config(upstream.url)) as client:
        doc = (await client.get("/schema/openapi.json")).json()
    responses = doc["paths"]["/v1/responses"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    for name in ("input", "instructions", "tools", "tool_choice", "text", "max_output_tokens", "stream",
                 "previous_response_id", "reasoning"):
        assert name in responses["properties"], name
    emb = doc["paths"]["/v1/embeddings"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert emb["properties"]["encoding_format"]["enum"] == ["float", "base64"]
    assert "get" in doc["paths"]["/v1/responses/{response_id}"]
