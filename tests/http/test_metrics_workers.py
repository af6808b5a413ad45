"""``/metrics`` under ``--workers 2``: a scrape of either worker counts every worker's requests."""

from __future__ import annotations

import asyncio
import os
import signal

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import KEY
from tests.http.test_server import MODEL, children, running, write_config


def total_requests(text: str) -> float:
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "switchyard_requests_total")


async def test_any_worker_reports_all_workers(upstream, redis_url, tmp_path):
    team = f"metricsworkers{os.getpid()}"
    path = write_config(tmp_path, upstream.url, redis_url, team)
    async with running(path, "--workers", "2") as (proc, port):
        assert len(children(proc.pid)) >= 2
        fresh = httpx.Limits(max_keepalive_connections=0)  # a new connection each: both workers serve
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30, limits=fresh,
                                     headers={"authorization": f"Bearer {KEY}"}) as client:
            for _ in range(30):
                r = await client.post("/v1/completions",
                                      json={"model": MODEL, "prompt": "hi", "max_tokens": 1})
                assert r.status_code == 200
            await asyncio.sleep(1.5)  # each worker writes its figures once a second
            scrapes = [(await client.get("/metrics")).text for _ in range(12)]
        assert [total_requests(t) for t in scrapes] == [30.0] * 12
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
