"""A model group whose window is configured, served by the engine: the engine fits the request
itself, exactly, with the model's own tokenizer (the gateway's estimate would be coarser)."""

from __future__ import annotations

import asyncio

import httpx

from tests.gateway.conftest import base_config, serve


async def test_engine_routes_honour_overflow_policies_with_their_own_tokenizer(tiny_dir):
    config = base_config([{"name": "local/m", "context_window": 256, "deployments": [
        {"name": "engine", "backend": "engine", "engine": {"path": str(tiny_dir), "threads": 1}}]}])
    async with serve(config) as client:
        client.timeout = httpx.Timeout(120)
        for _ in range(600):
            if (await client.get("/ready")).status_code == 200:
                break
            await asyncio.sleep(0.1)
        long = "The quick brown fox jumps over the lazy dog. " * 40  # far over 256 tokens
        cut = await client.post("/v1/completions", json={"model": "local/m", "prompt": long, "max_tokens": 4,
                                                          "truncate_sequence": True, "temperature": 0})
        lowered = await client.post("/inference/v1/completions", json={
            "model": "local/m", "prompt": "Hello", "max_tokens": 1000, "ignore_eos": True,
            "context_length_exceeded_behavior": "truncate"})
        refused = await client.post("/v1/completions", json={"model": "local/m", "prompt": long,
                                                              "max_tokens": 4})
    assert cut.status_code == 200, cut.text
    assert cut.json()["usage"]["prompt_tokens"] == 256 - 4
    assert lowered.status_code == 200, lowered.text
    u = lowered.json()["usage"]
    assert u["prompt_tokens"] + u["completion_tokens"] == 256
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "prompt"
