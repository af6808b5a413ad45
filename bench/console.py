"""What the console's reads cost on a big ledger.

    .venv/bin/python bench/console.py [--rows 2000000] [--repeat 15]

Fills a fresh ledger with ``--rows`` requests spread over the last 30 days (4 teams, 50 keys, 5
models; ``generate_series`` in PostgreSQL, then the hourly rollup from them), then times the calls
the console makes, through the same code the admin API runs, against a baseline in the same run:
``SELECT 1`` over the same pool. Reports the median and p95 (ms) and the median / baseline ratio.

Uses $DATABASE_URL (a fresh database on it) or starts its own PostgreSQL. Run it under
``flock /tmp/bench.lock`` on a shared machine; compare ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from switchyard.core.config import parse_config  # noqa: E402
from switchyard.http.console.overview import overview  # noqa: E402
from switchyard.policies.factory import build_policies  # noqa: E402
from switchyard.policies.latency import latency  # noqa: E402
from switchyard.policies.usage_filter import parse_filter  # noqa: E402
from tests.policies.ledger.conftest import fresh_database  # noqa: E402
from tests.policies.ledger.postgres import postgres  # noqa: E402

FILL = """
INSERT INTO usage_records
SELECT lpad(to_hex(i), 16, '0'), now() - (i::double precision / $1) * interval '30 days',
       'req-' || i, 'k' || (i % 50), (ARRAY['a','b','c','d'])[1 + i % 4], 'openai/m' || (i % 5),
       'm' || (i % 5), 'openai/m' || (i % 5) || '/d1', '/v1/chat/completions', 'chat',
       CASE WHEN i % 50 = 0 THEN 429 ELSE 200 END, 100 + i % 900, i % 300, 0, 250000 + i % 1000,
       5 + (i % 97), CASE WHEN i % 3 = 0 THEN -1 ELSE 2 + i % 31 END, 1, false
FROM generate_series(1, $1) AS i
"""
ROLLUP = """
INSERT INTO usage_hourly
SELECT date_trunc('hour', ts), team, key_id, model, deployment, status, count(*),
       count(*) FILTER (WHERE status >= 400), sum(prompt_tokens), sum(completion_tokens),
       sum(cached_tokens), sum(cost_nano), sum(latency_ms)
FROM usage_records GROUP BY 1, 2, 3, 4, 5, 6
"""


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int) -> list[float]:
    await fn()  # warm: plans, buffers
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def main(rows: int, repeat: int) -> None:
    with postgres() as (server, _):
        url = await fresh_database(server)
        cfg = parse_config({"master_key": "bench-master-key-0001", "usage": {"ledger": url},
                            "teams": [{"name": t} for t in "abcd"], "models": []})
        p = build_policies(cfg)
        assert p.ledger is not None
        await p.ledger.sink.pool()  # migrates the schema
        t0 = time.perf_counter()
        conn = await asyncpg.connect(url)  # no statement timeout: the fill takes a while
        try:
            await conn.execute(FILL, rows)
            await conn.execute(ROLLUP)
            await conn.execute("ANALYZE usage_records; ANALYZE usage_hourly")
            hourly = await conn.fetchval("SELECT count(*) FROM usage_hourly")
        finally:
            await conn.close()
        print(f"filled {rows} rows ({hourly} hourly rollup rows) in {time.perf_counter() - t0:.1f} s")
        now = dt.datetime.now(dt.UTC)

        async def select1() -> None:
            async with p.ledger.sink.reading() as conn:  # type: ignore[union-attr]
                await conn.fetchval("SELECT 1")

        page1 = await p.usage.records(parse_filter({"limit": "50"}, records=True))
        deep = page1
        for _ in range(20):  # 20 pages in: keyset pages cost what the first does
            deep = await p.usage.records(parse_filter({"limit": "50", "cursor": deep["next_cursor"]},
                                                      records=True))
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "baseline: SELECT 1": select1,
            "overview 1h": lambda: overview(p, "1h", now),
            "overview 24h": lambda: overview(p, "24h", now),
            "overview 30d": lambda: overview(p, "30d", now),
            "latency p50/p95, 1 h": lambda: latency(p.store, p.registry, p.ledger, window_s=3600),
            "latency p50/p95, 30 d": lambda: latency(p.store, p.registry, p.ledger, window_s=30 * 86400),
            "latency, team b, 30 d": lambda: latency(p.store, p.registry, p.ledger, window_s=30 * 86400,
                                                    team="b"),
            "records page 1 (50)": lambda: p.usage.records(parse_filter({"limit": "50"}, records=True)),
            "records page 21 (cursor)": lambda: p.usage.records(
                parse_filter({"limit": "50", "cursor": deep["next_cursor"]}, records=True)),
            "records, key k7, page 1": lambda: p.usage.records(
                parse_filter({"limit": "50", "key": "k7"}, records=True)),
        }
        base = None
        print(f"{'call':28} {'p50 ms':>8} {'p95 ms':>8} {'p50 / base':>10}")
        for name, fn in calls.items():
            ms = sorted(await timed(fn, repeat))
            med = statistics.median(ms)
            base = base or med
            p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
            print(f"{name:28} {med:8.2f} {p95:8.2f} {med / base:10.1f}")
        await p.aclose()
        conn = await asyncpg.connect(server)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{urlsplit(url).path[1:]}" WITH (FORCE)')
        finally:
            await conn.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=15)
    a = ap.parse_args()
    asyncio.run(main(a.rows, a.repeat))
