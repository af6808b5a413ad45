"""Redis unavailable: fail-closed is a 503, fail-open serves and reconciles; never a 500 or a hang."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import pytest

from switchyard.core.canonical import Usage
from switchyard.core.errors import RateLimited, Unavailable
from switchyard.core.settings import Limits
from switchyard.policies.base import Outcome, Principal
from switchyard.policies.keys import KeyRing
from switchyard.policies.limits import Limiter
from switchyard.policies.pricing import Pricing
from switchyard.policies.redis_store import RedisStore
from switchyard.policies.store import DAY_MS
from tests.conftest import free_port, start_redis, stop
from tests.policies.conftest import make_config

P = Principal(key_id="alice", team="ml", key_limits=Limits(rpm=3, tokens_per_day=10_000))


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    """A server that accepts connections and never answers: a hung Redis."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        held.append(w)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    for w in held:
        w.close()
    server.close()


def limiter_at(url: str, timeout: float = 0.25) -> Limiter:
    return Limiter(RedisStore.from_url(url, timeout=timeout, ns="down"), Pricing(make_config()), down_for=0.2)


async def close(lim: Limiter) -> None:
    """The limiter, then its store (in the gateway, ``Policies.aclose`` closes both)."""
    await lim.aclose()
    await lim.store.aclose()


async def wake_and_drain(proc: Any, lim: Limiter) -> None:
    """SIGCONT a stopped redis-server and wait for the limiter to replay its backlog into it."""
    os.kill(proc.pid, signal.SIGCONT)
    for _ in range(200):
        if lim.backlog == 0:
            break
        await asyncio.sleep(0.05)
    assert lim.backlog == 0


async def test_fail_closed_is_503_when_nothing_listens():
    lim = limiter_at(f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(Unavailable) as e:
        await lim.admit(P, "local/smol", prompt_tokens=1, max_tokens=1)
    assert e.value.status == 503 and e.value.headers["Retry-After"] == "1"
    with pytest.raises(Unavailable):  # and again while it is marked down, without trying
        await lim.admit(P, "local/smol", prompt_tokens=1, max_tokens=1)
    await close(lim)


async def test_a_hung_redis_times_out_into_503(silent_port):
    lim = limiter_at(f"redis://127.0.0.1:{silent_port}/0", timeout=0.2)
    with pytest.raises(Unavailable):
        await lim.admit(P, "local/smol", prompt_tokens=1, max_tokens=1)
    await close(lim)


async def test_fail_open_serves_and_still_limits_locally():
    lim = limiter_at(f"redis://127.0.0.1:{free_port()}/0")
    tickets = [await lim.admit(P, "local/smol", prompt_tokens=1, max_tokens=1, fail_open=True)
               for _ in range(3)]
    assert all(t.local for t in tickets)
    with pytest.raises(RateLimited):
        await lim.admit(P, "local/smol", prompt_tokens=1, max_tokens=1, fail_open=True)
    for t in tickets:
        await lim.settle(t, Outcome(Usage(1, 1), 200, deployment="eng", latency_ms=1))  # must not raise
    assert lim.backlog == 1 + 3  # the first admission's cancellation (it may run late), 3 replays
    await close(lim)


async def test_key_lookup_survives_a_down_store():
    """Config keys still work; any other key is a 503 (it may be an admin-made key), never a 401."""
    cfg = make_config()
    store = RedisStore.from_url(f"redis://127.0.0.1:{free_port()}/0", ns="d")
    ring = KeyRing.from_config(cfg, store=store)
    found = await ring.lookup("sk-alice")
    assert found is not None and found.key_id == "alice"
    with pytest.raises(Unavailable) as e:
        await ring.lookup("sk-nobody")
    await store.aclose()
    assert e.value.status == 503 and e.value.headers["Retry-After"] == "1"
    assert "sk-nobody" not in e.value.message


async def test_fail_open_usage_is_reconciled_into_redis_when_it_returns():
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        proc = start_redis(port, cwd=d)
        lim = limiter_at(f"redis://127.0.0.1:{port}/0", timeout=0.5)
        try:
            t = await lim.admit(P, "openai/gpt-4o", prompt_tokens=100, max_tokens=100, fail_open=True)
            assert not t.local
            await lim.settle(t, Outcome(Usage(100, 50), 200, deployment="oai", latency_ms=1))
            await lim.flush()  # settle returns once sent: let it land before Redis goes away
            stop(proc)
            t = await lim.admit(P, "openai/gpt-4o", prompt_tokens=200, max_tokens=100, fail_open=True)
            assert t.local
            await lim.settle(t, Outcome(Usage(200, 70), 200, deployment="oai", latency_ms=1))
            assert lim.backlog == 2  # the failed shared admission's cancellation, then the replay
            proc = start_redis(port, cwd=d)  # back, empty (no persistence): only the replay is there
            for _ in range(200):
                if lim.backlog == 0:
                    break
                await asyncio.sleep(0.05)
            assert lim.backlog == 0
            day = t.admitted_ms // DAY_MS
            agg = (await lim.store.aggregates("ml", [day]))[day]
            assert agg["alice\x1fopenai/gpt-4o\x1fprompt_tokens"] == 200
            assert agg["alice\x1fopenai/gpt-4o\x1fcompletion_tokens"] == 70
            (quota,) = [await lim.store.client.hgetall(s.keys[0]) for s in t.plan.scopes]
            assert int(quota[b"td"]) == 270  # the daily quota counts what was served while down
            # and the shared limits work again
            t = await lim.admit(P, "openai/gpt-4o", prompt_tokens=1, max_tokens=1, fail_open=True)
            assert not t.local
        finally:
            await close(lim)
            stop(proc)


async def test_admissions_that_time_out_in_a_redis_stall_leave_nothing_behind():
    """SIGSTOP, not an outage: admissions the gateway gave up on run when Redis wakes. They must
    not keep their tokens, their request or their concurrency slot."""
    stalled = Principal(key_id="bob", team="ml",
                        key_limits=Limits(rpm=100, tokens_per_day=1000, max_concurrency=1))
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        proc = start_redis(port, cwd=d)
        lim = limiter_at(f"redis://127.0.0.1:{port}/0", timeout=0.2)
        lim.down_for = 0.0  # try the store on every call: each admission below reaches it
        try:
            t = await lim.admit(stalled, "local/smol", prompt_tokens=10, max_tokens=10)
            await lim.settle(t, Outcome(Usage(10, 10), 200))
            await lim.flush()
            os.kill(proc.pid, signal.SIGSTOP)
            for _ in range(4):
                with pytest.raises(Unavailable):
                    await lim.admit(stalled, "local/smol", prompt_tokens=100, max_tokens=100)
            await wake_and_drain(proc, lim)
            # 20 tokens were really used today: 980 fit, and the one slot is free.
            t = await lim.admit(stalled, "local/smol", prompt_tokens=480, max_tokens=500)
            with pytest.raises(RateLimited):  # ... and now it is taken
                await lim.admit(stalled, "local/smol", prompt_tokens=0, max_tokens=0)
            await lim.settle(t, Outcome(Usage(480, 500), 200))
        finally:
            os.kill(proc.pid, signal.SIGCONT)
            await close(lim)
            stop(proc)


async def test_a_settlement_replayed_after_a_redis_stall_counts_once():
    """SIGSTOP while a request settles: the gateway gives up waiting and queues the settlement
    for replay, but the command it sent runs when Redis wakes. The replay must find it done:
    the usage counts once and the ledger gets one record."""
    import redis.asyncio as aioredis

    who = Principal(key_id="carol", team="ml", key_limits=Limits(rpm=100, tokens_per_day=1000))
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        proc = start_redis(port, cwd=d)
        url = f"redis://127.0.0.1:{port}/0"
        lim = limiter_at(url, timeout=0.2)
        lim.down_for = 0.0
        raw = aioredis.from_url(url)
        try:
            t = await lim.admit(who, "local/smol", prompt_tokens=100, max_tokens=400)  # 500 reserved
            os.kill(proc.pid, signal.SIGSTOP)
            await lim.settle(t, Outcome(Usage(100, 200), 200))  # 300 used: 200 given back
            await lim.flush()
            assert lim.backlog == 1  # timed out: queued, though the command is on the wire
            await wake_and_drain(proc, lim)
            # 300 tokens were used today (not 100: the 200 were given back once): 700 more fit
            t = await lim.admit(who, "local/smol", prompt_tokens=700, max_tokens=0)
            await lim.settle(t, Outcome(Usage(700, 0), 200))
            await lim.flush()
            with pytest.raises(RateLimited):  # and now the day's 1,000 are spent
                await lim.admit(who, "local/smol", prompt_tokens=1, max_tokens=1)
            logs = [k async for k in raw.scan_iter(match="*:log")]
            assert len(logs) == 1 and await raw.xlen(logs[0]) == 2  # one record a request
        finally:
            os.kill(proc.pid, signal.SIGCONT)
            await raw.aclose()
            await close(lim)
            stop(proc)


async def test_a_cancelled_store_call_is_cancelled(redis_url):
    """Stopping a background loop cancels its task mid-command: the cancellation must come out of
    the store (redis-py's socket_timeout bounds writes with asyncio.wait_for, which on Python 3.11
    swallowed about half such cancellations, and a gateway then hung at shutdown)."""
    store = RedisStore.from_url(redis_url, timeout=2.0)
    stop = False

    async def reads() -> None:
        while not stop:  # a swallowed cancellation would leave it reading
            await store.aggregates("nobody", [1, 2, 3])

    swallowed = 0
    try:
        for i in range(400):
            task = asyncio.create_task(reads())
            await asyncio.sleep(0.0002 * (i % 10))
            task.cancel()
            await asyncio.wait({task}, timeout=2)
            swallowed += not task.cancelled()
    finally:
        stop = True
        await asyncio.sleep(0.1)
        await store.aclose()
    assert swallowed == 0
