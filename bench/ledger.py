"""The usage ledger's write rate, and what it costs the hot path.

    .venv/bin/python bench/ledger.py [--rows 50000] [--requests 4000] [--rounds 2]

1. Rows/s into PostgreSQL: ``PgSink.write`` alone (batches of 500), and end to end from Redis
   streams (records XADDed to 4 team streams, drained by ``RedisFeed``: XREADGROUP, INSERT,
   XACK, trim).
2. The hot path: a gateway process (redis store, ``../shared/bench/mock_upstream.py`` upstream)
   with the ledger off and on, alternately, ``--rounds`` times each: requests/s at 32 concurrent
   non-streaming requests from an asyncio client, and the gateway process's CPU per request (its
   feed runs in the same process, so its cost is counted there). Then checks that the ledger
   holds one row per request served.

Uses $DATABASE_URL (fresh databases on it) or starts its own PostgreSQL, and its own
redis-server. Run it under ``flock /tmp/bench.lock`` on a shared machine; compare rows within
one run (ratios), never figures across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import asyncpg  # noqa: E402
from redis.asyncio import Redis  # noqa: E402

from bench.overhead import Procs, cpu_seconds, free_port, wait_http  # noqa: E402
from switchyard.policies.ledger.redis_feed import RedisFeed  # noqa: E402
from switchyard.policies.ledger.sink import PgSink  # noqa: E402
from switchyard.policies.plan import tag  # noqa: E402
from switchyard.policies.store import UsageRecord  # noqa: E402
from tests.conftest import start_redis, stop  # noqa: E402
from tests.policies.ledger.conftest import fresh_database  # noqa: E402
from tests.policies.ledger.postgres import postgres  # noqa: E402

MOCK = ROOT.parent / "shared" / "bench" / "mock_upstream.py"
KEY = "sk-bench"
TEAMS = ("a", "b", "c", "d")


def record(i: int) -> UsageRecord:
    return UsageRecord(ts_ms=1_764_000_000_000 + i * 7, key_id=f"k{i % 50}", team=TEAMS[i % 4],
                       model=f"openai/m{i % 5}", deployment="openai/m/d1", prompt_tokens=100 + i % 900,
                       completion_tokens=i % 300, cached_tokens=0, cost_nano=250_000 + i, status=200,
                       latency_ms=12.5, request_id=f"req-{i}", ticket_id=f"{i:018x}",
                       endpoint="/v1/completions", dialect="openai", requested_model="m", attempts=1,
                       ttfb_ms=-1.0, cut=False)


async def sink_rate(url: str, rows: int) -> float:
    sink = PgSink(url)
    await sink.pool()
    recs = [record(i).as_fields() for i in range(rows)]
    t0 = time.perf_counter()
    for i in range(0, rows, 500):
        await sink.write(recs[i:i + 500])
    dt = time.perf_counter() - t0
    await sink.aclose()
    return rows / dt


async def feed_rate(url: str, redis_port: int, rows: int) -> tuple[float, float]:
    """(rows/s, this process's CPU per row in us) draining ``rows`` records from 4 team streams."""
    r = Redis(port=redis_port)
    ns = "bench"
    pipe = r.pipeline(transaction=False)
    for i in range(rows):
        rec = record(i)
        pipe.xadd(f"{ns}:{tag(rec.team)}:log", rec.as_fields())
    await pipe.execute()
    sink = PgSink(url)
    await sink.pool()

    async def teams() -> list[str]:
        return list(TEAMS)

    feed = RedisFeed(r, ns, sink, teams, batch=500)
    t0, c0 = time.perf_counter(), time.process_time()
    while feed.written < rows:
        if not await feed.step():
            break
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert feed.written == rows, (feed.written, rows)
    await sink.aclose()
    await r.aclose()
    return rows / dt, cpu / rows * 1e6


async def load(port: int, n: int, conc: int = 32) -> float:
    body = json.dumps({"model": "mock/gpt", "prompt": "Say this is a test", "max_tokens": 16})
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    todo = iter(range(n))
    async with aiohttp.ClientSession() as s:
        async def worker() -> None:
            for _ in todo:
                async with s.post(f"http://127.0.0.1:{port}/v1/completions", data=body, headers=headers) as r:
                    await r.read()
                    assert r.status == 200, r.status
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(conc)))
        return n / (time.perf_counter() - t0)


def pg_cpu(postmaster: int | None) -> float:
    """CPU seconds of a PostgreSQL server's processes (the postmaster's children); 0 when unknown."""
    if postmaster is None:
        return 0.0
    total = 0.0
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == postmaster:
                total += cpu_seconds(int(d.name))
            elif int(d.name) == postmaster:  # with its children that exited (cutime, cstime)
                total += sum(int(v) for v in stat[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def gateway_run(procs: Procs, up: int, redis: str, ledger: str | None, n: int,
                postmaster: int | None = None) -> tuple[float, float, float]:
    cfg = {"store": {"url": redis},
           "models": [{"name": "mock/gpt", "deployments": [
               {"name": "d", "base_url": f"http://127.0.0.1:{up}/v1"}]}],
           "teams": [{"name": "bench"}], "keys": [{"id": "bench", "team": "bench", "key": KEY}]}
    if ledger:
        cfg["usage"] = {"ledger": ledger}
    path = Path(tempfile.mkdtemp()) / "gw.json"
    path.write_text(json.dumps(cfg))
    port = free_port()
    gw = procs.start([sys.executable, "-m", "switchyard", "serve", "--config", str(path),
                      "--port", str(port)], cwd=ROOT)
    wait_http(port)
    asyncio.run(load(port, 300))  # warm-up
    cpu0, pg0 = cpu_seconds(gw.pid), pg_cpu(postmaster)
    rps = asyncio.run(load(port, n))
    cpu = (cpu_seconds(gw.pid) - cpu0) / n * 1e6
    gw.terminate()
    gw.wait(30)  # a graceful stop: the ledger drains what is left
    return rps, cpu, (pg_cpu(postmaster) - pg0) / n * 1e6


async def count_rows(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval("SELECT count(*) FROM usage_records")
    finally:
        await conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with postgres() as (server, pg):
        postmaster = int((pg.data / "postmaster.pid").read_text().split()[0]) if pg is not None else None
        procs = Procs()
        rport = free_port()
        redis = start_redis(rport, cwd=tempfile.mkdtemp())
        try:
            sink = asyncio.run(sink_rate(asyncio.run(fresh_database(server)), args.rows))
            feed = asyncio.run(feed_rate(asyncio.run(fresh_database(server)), rport, args.rows))
            up = free_port()
            procs.start([sys.executable, str(MOCK), "--port", str(up)])
            wait_http(up, "/health")
            res: dict[str, list[tuple[float, float, float]]] = {"off": [], "on": []}
            ledger_db = asyncio.run(fresh_database(server))
            for i in range(args.rounds):  # a Redis db per run: the ledger sees only its runs' records
                res["off"].append(gateway_run(procs, up, f"redis://127.0.0.1:{rport}/{2 * i + 1}", None,
                                              args.requests))
                res["on"].append(gateway_run(procs, up, f"redis://127.0.0.1:{rport}/{2 * i + 2}",
                                             ledger_db, args.requests, postmaster))
            rows = asyncio.run(count_rows(ledger_db))
        finally:
            procs.stop()
            stop(redis)
    served = args.rounds * (args.requests + 300)
    off_rps = statistics.median(r[0] for r in res["off"])
    on_rps = statistics.median(r[0] for r in res["on"])
    off_cpu = statistics.median(r[1] for r in res["off"])
    on_cpu = statistics.median(r[1] for r in res["on"])
    pg_req = statistics.median(r[2] for r in res["on"])
    print(f"\nledger bench: {args.rows} rows, {args.requests} requests x {args.rounds} rounds per mode\n")
    print(f"PgSink.write, batches of 500          {sink:>10.0f} rows/s")
    print(f"Redis streams -> ledger (RedisFeed)   {feed[0]:>10.0f} rows/s   its CPU per row {feed[1]:.1f} us")
    runs = {k: [round(r[0]) for r in v] for k, v in res.items()}
    print(f"gateway requests/s, ledger off        {off_rps:>10.0f}   runs {runs['off']}")
    print(f"gateway requests/s, ledger on         {on_rps:>10.0f}   runs {runs['on']}"
          f"   ratio on/off {on_rps / off_rps:.3f}")
    print(f"gateway CPU per request, off / on     {off_cpu:>10.0f} / {on_cpu:.0f} us"
          f"   (+{on_cpu - off_cpu:.0f} us)")
    if postmaster is not None:
        print(f"PostgreSQL CPU per request, ledger on {pg_req:>10.0f} us   (the same cores, on this box)")
    print(f"ledger rows after the 'on' runs       {rows:>10d}   (requests served with it on: {served})")
    return 0 if rows == served else 1


if __name__ == "__main__":
    sys.exit(main())
