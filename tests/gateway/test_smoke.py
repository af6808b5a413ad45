"""End to end through real sockets: caller -> gateway -> loopback upstream and back."""

from __future__ import annotations

import json

from tests.gateway.conftest import base_config, upstream_model


async def test_completion_round_trip(upstream, gateway_for):
    cfg = base_config([upstream_model("mock/gpt", upstream.url)])
    async with gateway_for(cfg) as client:
        r = await client.post("/v1/completions", json={"model": "mock/gpt", "prompt": "hi", "max_tokens": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion"
    assert body["model"] == "mock/gpt"
    assert body["choices"][0]["text"] == "w0 w1 w2"
    assert body["usage"]["completion_tokens"] == 3
    assert upstream.requests[0].body["model"] == "gpt"
    assert r.headers["x-switchyard-deployment"] == "mock/gpt/d1"


async def test_sgp_stream_renders_llamacpp_upstream(upstream, gateway_for):
    cfg = base_config([upstream_model("llama/tiny", upstream.url, dialect="llamacpp")])
    async with gateway_for(cfg) as client:
        r = await client.post("/v4/beta/completions", headers={"x-api-key": "sk-test-key"},
                              json={"model": "llama/tiny", "prompt": "hi", "max_new_tokens": 2,
                                    "stream": True, "stop_sequences": ["zz"]})
    assert r.status_code == 200, r.text
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert "[DONE]" not in events  # SGP's SDKs parse every data line as JSON
    assert json.loads(events[-1])["usage"]["completion_tokens"] == 2  # SGP: usage always last
    sent = upstream.requests[0].body
    assert sent["max_tokens"] == 2 and sent["stop"] == ["zz"] and "max_new_tokens" not in sent
