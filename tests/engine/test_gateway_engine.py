"""The engine behind the real gateway (HTTP on loopback, tiny model): what real clients send."""

from __future__ import annotations

import json

import pytest
import pytest_asyncio

from tests.engine.conftest import engine_gateway

pytestmark = pytest.mark.asyncio(loop_scope="module")

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "blue"]}},
          "required": ["ok", "color"], "additionalProperties": False}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw(tiny_dir):
    async with engine_gateway(str(tiny_dir)) as client:
        yield client


def sse_json(raw: str) -> list[dict]:
    return [json.loads(line[6:]) for line in raw.split("\n") if line.startswith("data: {")]


@pytest.mark.parametrize("path", ["/inference/v1/completions", "/v1/completions"])
@pytest.mark.parametrize("stream", [False, True])
async def test_fireworks_response_format_schema_is_enforced(gw, path, stream):
    body = {"model": "local/m", "prompt": "Hello", "max_tokens": 40, "temperature": 1.0, "stream": stream,
            "response_format": {"type": "json_object", "schema": SCHEMA}}
    for seed in range(3):
        r = await gw.post(path, json={**body, "seed": seed})
        assert r.status_code == 200, r.text
        assert "x-switchyard-warning" not in r.headers
        if stream:
            events = sse_json(r.text)
            text = "".join(c["text"] for e in events for c in e["choices"])
        else:
            text = r.json()["choices"][0]["text"]
        value = json.loads(text)
        assert isinstance(value["ok"], bool) and value["color"] in ("red", "blue")


async def test_chat_content_parts_over_http(gw):
    parts = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]
    ok = await gw.post("/v1/chat/completions", json={
        "model": "local/m", "max_tokens": 3, "messages": [{"role": "user", "content": parts}]})
    assert ok.status_code == 200, ok.text
    bad = await gw.post("/v1/chat/completions", json={"model": "local/m", "messages": [
        {"role": "user", "content": [*parts, {"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}]})
    assert bad.status_code == 400
    err = bad.json()["error"]
    assert err["param"] == "messages[0].content" and "image_url" in err["message"]
    assert "Error" not in err["message"]
