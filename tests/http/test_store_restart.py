"""A real Redis restarted under a running gateway: the first calls on the connections it dropped
are sent again on fresh ones (no 503 burst), an admission whose reply was lost is not reserved
twice, and admin reads of a large record stream get their own deadline, not the hot path's."""

from __future__ import annotations

import asyncio
import tempfile
import uuid

import httpx
from litestar import Litestar
from redis.asyncio import Redis

from switchyard.core.settings import Limits
from switchyard.policies.base import Principal
from switchyard.policies.factory import build_policies
from switchyard.policies.redis_store import RedisStore
from tests.conftest import free_port, start_redis, stop
from tests.gateway.conftest import KEY, MASTER, base_config, upstream_model
from tests.http.test_admin import admin_routes
from tests.policies.conftest import make_config

MODEL = "v/m"
CHAT = "/v1/chat/completions"
# Keeps Redis busy (it runs one script at a time) for 0.6 s.
BUSY = """local t = redis.call('TIME'); local t0 = t[1] * 1e6 + t[2]
while true do local n = redis.call('TIME'); if n[1] * 1e6 + n[2] - t0 > 600000 then return 1 end end"""
ADMIN = {"authorization": f"Bearer {MASTER}"}


async def test_after_a_redis_restart_no_request_sees_the_dropped_connections(upstream, gateway_for):
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        proc = start_redis(port, cwd=d)
        cfg = base_config([upstream_model(MODEL, upstream.url)],
                          store={"url": f"redis://127.0.0.1:{port}/0", "timeout": 2.0},
                          keys=[{"id": "k1", "team": "t", "key": KEY,
                                 "limits": {"rpm": 10_000, "tokens_per_day": 10**9}}])
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        try:
            async with gateway_for(cfg) as client:
                # Warm both kinds of connection: the hot path's and redis-py's pool (several).
                rs = await asyncio.gather(*(client.post(CHAT, json=body) for _ in range(20)))
                assert {r.status_code for r in rs} == {200}
                assert (await client.get("/admin/keys", headers=ADMIN)).status_code == 200
                stop(proc)
                proc = start_redis(port, cwd=d)  # back, empty; every pooled connection is stale
                first = await client.get("/admin/teams", headers=ADMIN)
                assert first.status_code == 200, first.text
                rs = await asyncio.gather(*(client.post(CHAT, json=body) for _ in range(50)))
                assert [r.status_code for r in rs] == [200] * 50, [r.text for r in rs if r.status_code != 200]
        finally:
            stop(proc)


async def test_an_admission_sent_twice_reserves_once(redis_url):
    """What the reconnect-and-resend relies on: the same ticket admitted again changes nothing."""
    store = RedisStore.from_url(redis_url, timeout=2.0, ns=f"r{uuid.uuid4().hex[:8]}")
    p = Principal("alice", "ml", key_limits=Limits(tokens_per_day=1000))
    from switchyard.policies.limits import Limiter
    from switchyard.policies.pricing import Pricing
    lim = Limiter(store, Pricing(make_config()))
    plan = lim.plan_for(p, "local/smol")
    first = await store.admit(plan, tokens=600, spend=0, lease_id=None, lease_ttl_ms=60_000, ticket="t1")
    again = await store.admit(plan, tokens=600, spend=0, lease_id=None, lease_ttl_ms=60_000, ticket="t1")
    assert first.ok and again.ok and again.now_ms == first.now_ms
    other = await store.admit(plan, tokens=600, spend=0, lease_id=None, lease_ttl_ms=60_000, ticket="t2")
    assert not other.ok and other.kind == "tokens_per_day" and other.remaining == 400
    await store.aclose()


async def test_admin_reads_have_their_own_deadline_and_do_not_blame_the_store(redis_url):
    # A hot-path deadline no read of 6,000 records could meet; admin reads get 5 s.
    cfg = make_config(store={"url": redis_url, "timeout": 0.001, "admin_timeout": 5.0})
    pol = build_policies(cfg, ns=f"r{uuid.uuid4().hex[:8]}")
    store = pol.store
    assert isinstance(store, RedisStore)
    log = f"{store.ns}:{{ml}}:log"
    fields = {f: "x" * 40 for f in ("key_id", "team", "model", "deployment", "request_id", "ticket_id",
                                    "endpoint", "dialect", "requested_model")}
    pipe = store.client.pipeline(transaction=False)
    for i in range(6000):
        pipe.xadd(log, {**fields, "ts_ms": i, "prompt_tokens": 1, "completion_tokens": 1,
                        "cached_tokens": 0, "cost_nano": 0, "status": 200, "latency_ms": 1.0, "attempts": 1,
                        "ttfb_ms": 1.0, "cut": 0})
    await pipe.execute()
    app = Litestar(route_handlers=[admin_routes(pol)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw",
                                 headers={"authorization": "Bearer master-secret-0123456"}) as c:
        r = await c.get("/admin/usage/records", params={"team": "ml", "limit": 6000})
        assert r.status_code == 200, r.text
        assert len(r.json()["data"]) == 6000
        # Slower than even the admin deadline (Redis busy for 0.6 s): a 504 that says the query
        # was slow and how to narrow it, not that the store is unavailable.
        store.admin_timeout = 0.2
        other = Redis.from_url(redis_url)
        busy = asyncio.ensure_future(other.eval(BUSY, 0))
        await asyncio.sleep(0.05)
        r = await c.get("/admin/usage/records", params={"team": "ml", "limit": 10})
        await busy
        await other.aclose()
    assert r.status_code == 504, r.text
    msg = r.json()["error"]["message"]
    assert "within 0.2 s" in msg and "narrow the query" in msg and "unavailable" not in msg
    await pol.aclose()
