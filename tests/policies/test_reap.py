"""A gateway process killed with SIGKILL while requests are in flight: their quota reservations
are given back once nobody renews them (store.lease_ttl), by any replica, so the day's quota is
not over-charged; a ticket reaped while it was in fact alive is charged its whole usage when it
settles, once."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from switchyard.core.canonical import Usage
from switchyard.core.settings import Limits
from switchyard.policies.base import Outcome, Principal
from switchyard.policies.limits import Limiter
from switchyard.policies.pricing import Pricing
from switchyard.policies.redis_store import RedisStore
from switchyard.policies.store import UsageRecord
from tests.conftest import free_port, start_redis, stop
from tests.fakes.upstream import Behaviour, FakeUpstream
from tests.policies.conftest import make_config
from tests.policies.test_multiprocess import gateway, wait_healthy

KEY = "sk-reap-key"
QUOTA = 10_000
IN_FLIGHT = 8


async def reserved(r: Redis) -> int:
    """Tokens the day's counter of key k1 holds now."""
    return int(await r.hget("sy:{t}:k:k1:c", "td") or 0)


@pytest.mark.slow
async def test_sigkill_with_requests_in_flight_gives_their_reservations_back():
    with tempfile.TemporaryDirectory() as d:
        rport = free_port()
        redis_proc = start_redis(rport, cwd=d)
        procs: list[subprocess.Popen[bytes]] = []
        r = Redis.from_url(f"redis://127.0.0.1:{rport}/0")
        try:
            async with FakeUpstream() as up:
                up.script = [Behaviour(stall=120)] * IN_FLIGHT  # these never answer
                cfg = Path(d) / "gw.json"
                cfg.write_text(json.dumps({
                    "master_key": "reap-master-key-0123456789",
                    "store": {"url": f"redis://127.0.0.1:{rport}/0", "lease_ttl": 2},
                    "models": [{"name": "v/m", "deployments": [{"name": "d1", "base_url": up.url,
                                                                 "timeout": 300}]}],
                    "teams": [{"name": "t"}],
                    "keys": [{"id": "k1", "team": "t", "key": KEY,
                              "limits": {"tokens_per_day": QUOTA, "shrink_max_tokens": False}}]}))
                port = free_port()
                procs.append(gateway(cfg, port, Path(d) / "a.log"))
                await wait_healthy(port, procs)
                body = {"model": "v/m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1000}
                client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60,
                                           headers={"authorization": f"Bearer {KEY}"})
                calls = [asyncio.ensure_future(client.post("/v1/chat/completions", json=body))
                         for _ in range(IN_FLIGHT)]
                deadline = time.monotonic() + 30
                while up.inflight < IN_FLIGHT:
                    assert time.monotonic() < deadline, f"only {up.inflight} requests reached the upstream"
                    await asyncio.sleep(0.05)
                held = await reserved(r)
                assert held >= IN_FLIGHT * 1000  # every one holds its reservation
                await asyncio.sleep(2.5)  # past the lease ttl: the live replica keeps renewing
                assert await reserved(r) == held
                procs[0].send_signal(signal.SIGKILL)
                procs[0].wait()
                await asyncio.gather(*calls, return_exceptions=True)
                await client.aclose()

                # Another replica (a restart) reaps them once their reservations expire.
                port = free_port()
                procs.append(gateway(cfg, port, Path(d) / "b.log"))
                await wait_healthy(port, procs[1:])
                deadline = time.monotonic() + 20
                while await reserved(r):
                    assert time.monotonic() < deadline, f"{await reserved(r)} tokens still held"
                    await asyncio.sleep(0.1)
                assert await r.zcard("sy:{t}:resv") == 0
                # The whole quota is there again: a request reserving 9,000+ tokens is admitted.
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                             headers={"authorization": f"Bearer {KEY}"}) as c:
                    ok = await c.post("/v1/chat/completions", json={**body, "max_tokens": 9000})
                    assert ok.status_code == 200, ok.text
        finally:
            await r.aclose()
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(20)
                    except subprocess.TimeoutExpired:
                        p.kill()
            stop(redis_proc)


async def test_a_ticket_reaped_while_alive_is_charged_its_whole_usage_once(redis_url):
    store = RedisStore.from_url(redis_url, timeout=2.0, ns=f"r{uuid.uuid4().hex[:8]}")
    lim = Limiter(store, Pricing(make_config()), lease_ttl_ms=1000)
    p = Principal("alice", "ml", key_limits=Limits(tokens_per_day=1000, shrink_max_tokens=False))
    t = await lim.admit(p, "local/smol", prompt_tokens=100, max_tokens=500)
    lim._held.clear()  # a replica cut off from the store: its renewals do not arrive
    store.skew_ms = 2000  # ... for longer than the ttl
    assert await store.reap("ml") == 1
    assert await store.reap("ml") == 0  # once
    counter = f"{store.ns}:{{ml}}:k:alice:c"
    assert int(await store.client.hget(counter, "td")) == 0
    await lim.settle(t, Outcome(Usage(100, 50), 200, deployment="d", latency_ms=1.0))
    await lim.flush()
    assert int(await store.client.hget(counter, "td")) == 150  # the whole usage, once
    await lim.settle(t, Outcome(Usage(100, 50), 200, deployment="d", latency_ms=1.0))
    replay = UsageRecord(0, "alice", "ml", "local/smol", "d", 100, 50, 0, 0, 200, 1.0, ticket_id=t.id)
    await store.settle(t.plan, admitted_ms=t.admitted_ms, token_delta=150 - t.reserved_tokens, spend_delta=0,
                       lease_id=None, record=replay)
    assert int(await store.client.hget(counter, "td")) == 150  # a replayed settlement changes nothing
    await lim.aclose()
    await store.aclose()
