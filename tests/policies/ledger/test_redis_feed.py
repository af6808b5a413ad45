"""The write-ahead buffers (Redis's record streams, memory://'s queue): PostgreSQL stopped and
restarted mid-load, a consumer that dies holding records, acknowledged entries trimmed, and what is
buffered written at a graceful stop."""

from __future__ import annotations

import asyncio
import secrets

import httpx
import pytest
from redis.asyncio import Redis

from switchyard.core.config import parse_config
from switchyard.policies.factory import build_policies
from switchyard.policies.ledger.redis_feed import GROUP, RedisFeed
from switchyard.policies.ledger.sink import PgSink
from switchyard.policies.plan import tag
from switchyard.policies.redis_store import RedisStore
from tests.gateway.conftest import serve
from tests.policies.ledger.helpers import KEYS, expected_cost, ledger_config, wait_rows
from tests.policies.ledger.postgres import PgServer
from tests.policies.ledger.test_sink import rec


async def load(client: httpx.AsyncClient, prefix: str, stop: asyncio.Event, sent: list[httpx.Response],
               workers: int = 8) -> None:
    async def worker(w: int) -> None:
        i = 0
        while not stop.is_set():
            key = KEYS["k1"] if (w + i) % 2 else KEYS["k2"]
            body = {"model": "gpt-4o", "max_tokens": 1 + i % 5,
                    "messages": [{"role": "user", "content": "hi"}]}
            r = await client.post("/v1/chat/completions", json=body, headers={
                "authorization": f"Bearer {key}", "x-request-id": f"{prefix}-{w}-{i}"})
            sent.append(r)
            i += 1
    await asyncio.gather(*(worker(w) for w in range(workers)))


@pytest.mark.parametrize("store", ["redis", "memory"])
async def test_postgres_stopped_and_restarted_mid_load_loses_and_doubles_nothing(upstream, redis_url, store):
    pg = PgServer()
    pg.start()
    ns = "led" + secrets.token_hex(3)
    try:
        config = parse_config(ledger_config(upstream.url, pg.url,
                                            store=redis_url if store == "redis" else "memory://"))
        policies = build_policies(config, ns=ns)
        sent: list[httpx.Response] = []
        stop = asyncio.Event()
        async with serve(config, router=None, policies=policies) as client:
            task = asyncio.create_task(load(client, "r", stop, sent))
            await asyncio.sleep(0.7)
            await asyncio.to_thread(pg.stop)
            down_at = len(sent)
            await asyncio.sleep(1.5)  # requests go on; their records wait in the streams
            await asyncio.to_thread(pg.start)
            await asyncio.sleep(0.7)
            stop.set()
            await task
            assert len(sent) > down_at + 20  # the hot path did not wait for PostgreSQL
            assert {r.status_code for r in sent} == {200}
            rows = await wait_rows(pg.url, len(sent))
            assert len(rows) == len(sent)
            assert sorted(r["request_id"] for r in rows) == sorted(r.request.headers["x-request-id"]
                                                                   for r in sent)
            told = {r.request.headers["x-request-id"]: r.json()["usage"] for r in sent}
            for row in rows:
                u = told[row["request_id"]]
                assert (row["prompt_tokens"], row["completion_tokens"]) == (u["prompt_tokens"],
                                                                            u["completion_tokens"])
                assert row["cost_nano"] == expected_cost(u["prompt_tokens"], u["completion_tokens"])
            sink = PgSink(pg.url)
            try:
                roll = await (await sink.pool()).fetchval("SELECT sum(requests) FROM usage_hourly")
            finally:
                await sink.aclose()
            assert roll == len(sent)
            if store == "memory":
                assert policies.ledger is not None and policies.ledger.feed.pending == 0  # type: ignore[attr-defined]
                return
            # Written and acknowledged: trimmed (the last delivered entry may stay).
            r = Redis.from_url(redis_url)
            try:
                for team in ("t", "u"):
                    await wait_until(lambda t=team: r.xlen(f"{ns}:{tag(t)}:log"), 1)
            finally:
                await r.aclose()
    finally:
        pg.destroy()


async def wait_until(get, at_most: int, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Poll ``await get()`` until it is at most ``at_most`` (a deadline, not a measurement)."""
    v = None
    for _ in range(int(timeout / 0.05)):
        v = await get()
        if v <= at_most:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"still {v} after {timeout} s")


@pytest.mark.parametrize("kind", ["redis", "cluster"])
async def test_a_dead_consumers_records_are_claimed_and_written_once(request, database_url, kind):
    ns = "led" + secrets.token_hex(3)
    url = request.getfixturevalue("redis_url" if kind == "redis" else "redis_cluster_url")
    r = RedisStore.from_url(url, timeout=2.0).client
    sink = PgSink(database_url)
    key = f"{ns}:{tag('t')}:log"

    async def teams() -> list[str]:
        return ["t"]

    try:
        for i in range(30):
            await r.xadd(key, {k: v for k, v in rec(i).as_fields().items()})
        dead = RedisFeed(r, ns, sink, teams, batch=20, claim_idle=0.2)
        alive = RedisFeed(r, ns, sink, teams, batch=20, claim_idle=0.2)
        # The first consumer reads 20 records and dies before writing them.
        await r.xgroup_create(key, GROUP, id="0", mkstream=True)
        held = await dead._read(key, ">")
        assert len(held) == 20
        # The survivor takes the 10 never delivered at once; the dead one's 20 once they idled.
        alive._next_claim = float("inf")
        assert await alive.step() == 10
        assert await alive.step() == 0
        await asyncio.sleep(0.3)
        alive._next_claim = 0.0
        assert await alive.step() == 20
        assert alive.written == 30
        pool = await sink.pool()
        assert await pool.fetchval("SELECT count(DISTINCT ticket_id) FROM usage_records") == 30
        assert await pool.fetchval("SELECT sum(requests) FROM usage_hourly") == 30
        assert (await r.xpending(key, GROUP))["pending"] == 0
        assert await r.xlen(key) <= 1
        # The same records appended again (a settlement replayed after a timeout): not doubled.
        for i in range(5):
            await r.xadd(key, {k: v for k, v in rec(i).as_fields().items()})
        assert await alive.step() == 5 and alive.written == 30
        assert await pool.fetchval("SELECT count(*) FROM usage_records") == 30
    finally:
        await sink.aclose()
        await r.delete(key)
        await r.aclose()


async def test_a_graceful_stop_writes_what_is_still_queued(upstream, database_url):
    # A feed that would not poll again for a minute: only the drain at shutdown can write these.
    config = parse_config(ledger_config(upstream.url, database_url, interval=60.0))
    policies = build_policies(config)
    async with serve(config, policies=policies) as client:
        await client.post("/v1/chat/completions", headers={"authorization": f"Bearer {KEYS['k1']}"}, json={
            "model": "gpt-4o", "max_tokens": 2, "messages": [{"role": "user", "content": "a"}]})
        await asyncio.sleep(0.2)  # the feed's first poll has come and gone
        for i in range(12):
            r = await client.post("/v1/chat/completions", headers={"authorization": f"Bearer {KEYS['k2']}"},
                                  json={"model": "gpt-4o", "max_tokens": 2 + i,
                                        "messages": [{"role": "user", "content": "b"}]})
            assert r.status_code == 200
        assert policies.ledger is not None and policies.ledger.feed.pending >= 12  # type: ignore[attr-defined]
    rows = await wait_rows(database_url, 13, timeout=5)
    assert len(rows) == 13 and sorted(r["completion_tokens"] for r in rows) == [2, *range(2, 14)]
