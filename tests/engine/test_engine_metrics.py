"""The engine's gauges reach /metrics: batch size, queue depth, tokens/s and KV cache use while it
works, and zeros once it is idle (never its last batch)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.engine.conftest import engine_gateway

GAUGES = ("batch_size", "queue_depth", "tokens_per_second", "kv_cache_usage")


async def engine_gauges(client: httpx.AsyncClient) -> dict[str, float]:
    r = await client.get("/metrics")
    assert r.status_code == 200, r.text
    return {s.name.removeprefix("switchyard_engine_"): s.value
            for fam in text_string_to_metric_families(r.text) for s in fam.samples
            if s.name.startswith("switchyard_engine_") and s.labels.get("deployment") == "local/m/engine"}


async def test_engine_gauges_while_busy_and_once_idle(roomy_dir: Path) -> None:
    async with engine_gateway(str(roomy_dir), max_batch=2) as client:
        body = {"model": "local/m", "prompt": "count", "max_tokens": 1500, "ignore_eos": True}
        calls = [asyncio.create_task(client.post("/v1/completions", json=body)) for _ in range(6)]
        seen: list[dict[str, float]] = []
        while not all(c.done() for c in calls):
            seen.append(await engine_gauges(client))
            await asyncio.sleep(0.05)
        assert [c.result().status_code for c in calls] == [200] * 6
        busy = [g for g in seen if g.get("batch_size")]
        assert busy, f"no busy report in {len(seen)} scrapes"
        assert max(g["batch_size"] for g in busy) == 2  # max_batch
        assert max(g["queue_depth"] for g in busy) >= 1  # 6 requests for 2 slots
        assert max(g["tokens_per_second"] for g in busy) > 0
        assert all(0 < g["kv_cache_usage"] <= 1 for g in busy)
        await asyncio.sleep(0.5)  # the idle report follows the last step at once
        idle = await engine_gauges(client)
        assert set(GAUGES) <= idle.keys()
        assert idle["batch_size"] == idle["queue_depth"] == idle["kv_cache_usage"] == 0
