"""Added latency of the policy layer per request: admit, settle, admit+settle; p50 / p99.

    .venv/bin/python bench/policies.py [--n 5000] [--redis-url redis://...]

Starts its own redis-server on a free loopback port unless --redis-url / $REDIS_URL is given.
The baseline is a bare PING through the same redis-py client, measured in the same process; "raw
PING" is one through the hot path's own client (switchyard/policies/resp.py), the floor for admit / settle.
Settle returns once its command is sent (its reply is awaited in the background). Each admit is
timed after the previous settle landed; the "b2b" rows run back to back, so there each admit also
waits for the settle script queued ahead of it on the connection. Every scope carries every kind of limit
(rpm, tpm, concurrency, day/month token and spend quotas): the worst case.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from switchyard.core.canonical import Usage
from switchyard.core.config import parse_config
from switchyard.core.settings import Limits
from switchyard.policies.base import Outcome, Principal
from switchyard.policies.limits import Limiter
from switchyard.policies.memory import MemoryStore
from switchyard.policies.pricing import Pricing
from switchyard.policies.redis_store import RedisStore
from switchyard.policies.refusals import Refusals
from switchyard.policies.resp import RespConnection
from switchyard.policies.store import Store

BIG = Limits(rpm=10**9, tpm=10**12, max_concurrency=10**6, tokens_per_day=10**15, tokens_per_month=10**15,
             spend_per_day=10**6, spend_per_month=10**6)
WHO = Principal(key_id="bench", team="bench", key_limits=BIG, team_limits=BIG,
                team_model_limits={"openai/gpt-4o": BIG})
# A common setup: rpm + tpm on the key, rpm + tpm + a daily spend quota on the team.
TYPICAL = Principal(key_id="typ", team="typ", key_limits=Limits(rpm=10**9, tpm=10**12),
                    team_limits=Limits(rpm=10**9, tpm=10**12, spend_per_day=10**6))
CONFIG = parse_config({"models": [{
    "name": "openai/gpt-4o", "price": {"prompt_per_1m": 2.5, "completion_per_1m": 10},
    "deployments": [{"name": "d", "base_url": "http://127.0.0.1:9"}]}]})


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


async def timed(n: int, fn: Callable[[], Awaitable[object]]) -> list[float]:
    for _ in range(min(500, n)):  # warm up: connections, script cache, plan cache
        await fn()
    out = []
    for _ in range(n):
        t = time.perf_counter_ns()
        await fn()
        out.append((time.perf_counter_ns() - t) / 1e6)
    return out


async def measure(store: Store, n: int, who: Principal = WHO, landed: bool = True) -> dict[str, list[float]]:
    """``landed``: wait (untimed) for the previous settle's reply before each admit; else
    back to back, so each admit also waits for the settle script queued ahead of it."""
    lim = Limiter(store, Pricing(CONFIG))
    admits: list[float] = []
    settles: list[float] = []

    async def one() -> None:
        if landed:
            await lim.flush()
        t0 = time.perf_counter_ns()
        ticket = await lim.admit(who, "openai/gpt-4o", prompt_tokens=100, max_tokens=200)
        t1 = time.perf_counter_ns()
        await lim.settle(ticket, Outcome(Usage(100, 150), 200, deployment="d", latency_ms=10))
        t2 = time.perf_counter_ns()
        admits.append((t1 - t0) / 1e6)
        settles.append((t2 - t1) / 1e6)

    k = len(await timed(n, one))
    await lim.aclose()
    admits, settles = admits[-k:], settles[-k:]
    both = [a + b for a, b in zip(admits, settles, strict=True)]
    return {"admit": admits, "settle": settles, "admit+settle": both}


async def refusals(store: Store, n: int) -> dict[str, list[float]]:
    """A refused request's record (what the gateway adds to a refusal's path): the call returns
    once the command is queued, as settle does; "landed" waits for the previous one first."""
    rf = Refusals(store)
    out: list[float] = []

    async def one() -> None:
        await rf.flush()
        t0 = time.perf_counter_ns()
        rf.refused(WHO, model="openai/gpt-4o", status=429, reason="rate_limit:rpm@key", latency_ms=0.3,
                   request_id="0123456789abcdef0123456789abcdef", endpoint="/v1/chat/completions",
                   dialect="chat", requested_model="gpt-4o")
        out.append((time.perf_counter_ns() - t0) / 1e6)

    k = len(await timed(n, one))
    await rf.flush()
    return {"refusal record": out[-k:]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--redis-url", default=os.environ.get("REDIS_URL"))
    args = ap.parse_args()
    proc = None
    url = args.redis_url
    tmp = tempfile.TemporaryDirectory()
    if url is None:
        port = free_port()
        server = shutil.which("redis-server") or "redis-server"
        proc = subprocess.Popen([server, "--port", str(port), "--save", "", "--appendonly", "no",
                                 "--bind", "127.0.0.1"], cwd=tmp.name, stdout=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}/0"
        time.sleep(0.3)
    try:
        store = RedisStore.from_url(url, timeout=1.0, ns="bench")
        ping = await timed(args.n, lambda: store.client.execute_command("PING"))
        raw = await RespConnection.open("127.0.0.1", int(url.rsplit(":", 1)[1].split("/")[0]))
        raw_ping = await timed(args.n, lambda: raw.request(b"*1\r\n$4\r\nPING\r\n"))
        raw.close()
        results = {f"redis {k}": v for k, v in (await measure(store, args.n)).items()}
        results |= {f"redis typical {k}": v for k, v in (await measure(store, args.n, TYPICAL)).items()}
        b2b = await measure(store, args.n, TYPICAL, landed=False)
        results |= {f"redis typical b2b {k}": b2b[k] for k in ("admit", "admit+settle")}
        results |= {f"redis {k}": v for k, v in (await refusals(store, args.n)).items()}
        await store.client.flushdb()
        await store.aclose()
        results |= {f"memory {k}": v for k, v in (await measure(MemoryStore(ns="bench"), args.n)).items()}
        results |= {f"memory {k}": v for k, v in (await refusals(MemoryStore(ns="bench"), args.n)).items()}
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
        tmp.cleanup()
    base = pct(ping, 0.5)
    print(f"loop: {type(asyncio.get_event_loop()).__module__}, n={args.n}; worst case: 3 scopes x 7 limits;"
          " typical: key rpm+tpm, team rpm+tpm+spend/day")
    print(f"{'':32} {'p50 ms':>8} {'p99 ms':>8} {'p50 / PING':>11}")
    print(f"{'redis PING (baseline)':32} {base:8.3f} {pct(ping, 0.99):8.3f} {1.0:11.2f}")
    print(f"{'raw PING (hot-path client)':32} {pct(raw_ping, 0.5):8.3f} {pct(raw_ping, 0.99):8.3f}"
          f" {pct(raw_ping, 0.5) / base:11.2f}")
    for name, xs in results.items():
        print(f"{name:32} {pct(xs, 0.5):8.3f} {pct(xs, 0.99):8.3f} {pct(xs, 0.5) / base:11.2f}")


if __name__ == "__main__":
    try:
        import uvloop  # the gateway serves on uvloop; measure on it too
        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
