"""Four gateway processes, one Redis, bursts far over the limits: the limits hold across replicas
and the usage adds up to exactly what the upstream reported."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, start_redis, stop
from tests.fakes.upstream import FakeUpstream

PRICE = 1000.0  # USD per 1M tokens, both ways: $0.001 per token
RPM = 30
SPEND = 0.5  # USD per day
MAX_TOKENS = 10
REPLICAS = 4
PER_REPLICA = 40


def config(upstream: str, redis: str) -> dict:
    return {
        "master_key": "mk-0123456789abcdef",
        "store": {"url": redis, "timeout": 2.0},
        "models": [{"name": "openai/gpt-4o", "price": {"prompt_per_1m": PRICE, "completion_per_1m": PRICE},
                    "deployments": [{"name": "up", "base_url": upstream, "model": "gpt-4o"}]}],
        "teams": [{"name": "burst", "limits": {"rpm": RPM}},
                  {"name": "spend", "limits": {"spend_per_day": SPEND}}],
        "keys": [{"id": "k-burst", "team": "burst", "key": "sk-burst"},
                 {"id": "k-spend", "team": "spend", "key": "sk-spend"}],
    }


async def wait_healthy(port: int, procs: list[subprocess.Popen[bytes]]) -> None:
    async with httpx.AsyncClient() as c:
        for _ in range(600):
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("a gateway process exited at start")
            try:
                if (await c.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"gateway on {port} did not become healthy")


def gateway(cfg: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """``switchyard serve --config cfg`` on ``port`` (this checkout's code), its output appended to
    ``log``. The child has its own copy of the file: this process closes its one at once."""
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "switchyard", "serve", "--config", str(cfg),
                                 "--port", str(port)], env=dict(os.environ, PYTHONPATH=os.getcwd()),
                                stdout=out, stderr=out)


@contextlib.asynccontextmanager
async def serving(cfg: Path, ports: list[int], logdir: str) -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    """``gateway`` on each port, healthy before it yields; stopped after."""
    procs = [gateway(cfg, p, Path(logdir) / f"gw-{p}.log") for p in ports]
    try:
        for p in ports:
            await wait_healthy(p, procs)
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


async def burst(ports: list[int], key: str) -> list[httpx.Response]:
    body = {"model": "openai/gpt-4o", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": MAX_TOKENS}
    auth = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=500)) as c:
        return await asyncio.gather(*(
            c.post(f"http://127.0.0.1:{p}/v1/chat/completions", json=body, headers=auth)
            for p in ports for _ in range(PER_REPLICA)))


async def usage_of(port: int, team: str, want_requests: int) -> dict:
    async with httpx.AsyncClient() as c:
        for _ in range(100):  # settlement may trail the response by a moment
            total = (await c.get(f"http://127.0.0.1:{port}/admin/usage", params={"team": team},
                                 headers={"authorization": "Bearer mk-0123456789abcdef"})).json()["total"]
            if total["requests"] >= want_requests:
                return total
            await asyncio.sleep(0.05)
    return total


@pytest.mark.slow
async def test_four_replicas_share_limits_and_account_exactly():
    with tempfile.TemporaryDirectory() as d:
        rport = free_port()
        redis = start_redis(rport, cwd=d)
        try:
            async with FakeUpstream() as up:
                cfg = Path(d) / "gw.yaml"
                cfg.write_text(json.dumps(config(up.url, f"redis://127.0.0.1:{rport}/0")))
                ports = [free_port() for _ in range(REPLICAS)]
                async with serving(cfg, ports, d):
                    t0 = time.monotonic()
                    rs = await burst(ports, "sk-burst")
                    elapsed = time.monotonic() - t0
                    ok = [r for r in rs if r.status_code == 200]
                    limited = [r for r in rs if r.status_code == 429]
                    assert len(ok) + len(limited) == len(rs), {r.status_code for r in rs}
                    # GCRA: the whole minute's worth at once, then one more every 60/RPM s.
                    assert RPM <= len(ok) <= RPM + int(elapsed / (60 / RPM)) + 1
                    assert limited[0].headers["retry-after"].isdigit()
                    assert "team burst: requests per minute limit 30 reached" in limited[0].text
                    # Every request is counted, the refused ones too (with no tokens).
                    total = await usage_of(ports[0], "burst", len(rs))
                    assert (total["requests"], total["refused"]) == (len(rs), len(limited))
                    assert total["prompt_tokens"] == sum(r.json()["usage"]["prompt_tokens"] for r in ok)
                    completion = sum(r.json()["usage"]["completion_tokens"] for r in ok)
                    assert total["completion_tokens"] == completion

                    rs = await burst(ports, "sk-spend")
                    ok = [r for r in rs if r.status_code == 200]
                    assert {r.status_code for r in rs} <= {200, 429} and len(ok) < len(rs)
                    spent = sum(r.json()["usage"]["total_tokens"] for r in ok) * PRICE / 1e6
                    reservation = (7 + MAX_TOKENS) * PRICE / 1e6  # counted prompt + max_tokens
                    assert spent <= SPEND + reservation
                    # All at once, every admission holds a full reservation: that many fit, no fewer.
                    assert len(ok) >= int(SPEND / reservation)
                    total = await usage_of(ports[2], "spend", len(rs))
                    assert (total["requests"], total["refused"]) == (len(rs), len(rs) - len(ok))
                    assert total["cost_usd"] == pytest.approx(spent, abs=1e-9)
                    assert total["prompt_tokens"] == sum(r.json()["usage"]["prompt_tokens"] for r in ok)
        finally:
            stop(redis)
