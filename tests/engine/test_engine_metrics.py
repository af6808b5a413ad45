"""The engine's gauges reach /metrics: batch size, queue depth, tokens/s and KV cache use while it
works, and zeros once it is idle (never its last batch)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

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


async def until(client: httpx.AsyncClient, seen: list[dict[str, float]], done: Any,
                what: str) -> dict[str, float]:
    """Scrape until ``done(gauges)`` holds: the test waits on the engine's state, not on time, so
    a loaded machine only makes it slower (the bound is for a broken engine, not a slow one)."""
    for _ in range(6000):
        g = await engine_gauges(client)
        seen.append(g)
        if done(g):
            return g
        await asyncio.sleep(0.05)
    raise AssertionError(f"never {what} in {len(seen)} scrapes: {seen[-3:]}")


async def test_engine_gauges_while_busy_and_once_idle(roomy_dir: Path) -> None:
    async with engine_gateway(str(roomy_dir), max_batch=2) as client:
        # Six streams for two slots, held open until the gauges showed what is looked for, then
        # closed: no request has to run to its end, so no client timeout depends on how busy
        # this machine is today.
        body = {"model": "local/m", "prompt": "count", "max_tokens": 1500, "ignore_eos": True,
                "stream": True}
        stop = asyncio.Event()

        async def hold() -> int:
            async with client.stream("POST", "/v1/completions", json=body,
                                     timeout=httpx.Timeout(None)) as r:
                await stop.wait()
                return r.status_code

        calls = [asyncio.create_task(hold()) for _ in range(6)]
        seen: list[dict[str, float]] = []
        busy = await until(client, seen, lambda g: g.get("batch_size") == 2 and g.get("queue_depth", 0) >= 1
                           and g.get("tokens_per_second", 0) > 0, "busy with 2 running and more waiting")
        assert 0 < busy["kv_cache_usage"] <= 1
        assert all(g.get("batch_size", 0) <= 2 for g in seen)  # max_batch
        running = [c for c in calls if not c.done()]
        for c in running:
            c.cancel()  # the client hangs up: the engine drops those sequences
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert all(r == 200 or isinstance(r, asyncio.CancelledError) for r in results), results
        # Idle follows the last step at once (never the last batch's figures).
        idle = await until(client, seen, lambda g: g.get("batch_size") == 0 and g.get("queue_depth") == 0,
                           "idle once the streams were closed")
        assert set(GAUGES) <= idle.keys()
        assert idle["kv_cache_usage"] == 0
