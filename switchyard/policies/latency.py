"""Latency and time-to-first-byte percentiles over recent requests (``GET /admin/usage/latency``).

From the ledger when configured (the newest ``SAMPLE`` rows of the window, read on the
``(ts DESC)`` index, so the cost is bounded whatever the table's size), otherwise from the store's
per-team record streams (their newest ``SAMPLE`` records per team).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from typing import TYPE_CHECKING, Any

from switchyard.core.errors import InvalidRequest
from switchyard.policies.registry import Registry
from switchyard.policies.store import Store

if TYPE_CHECKING:
    from switchyard.policies.ledger import Ledger

SAMPLE = 10_000
MAX_WINDOW_S = 30 * 86_400


def parse_window(raw: str | None) -> int:
    try:
        w = int(raw) if raw else 3600
    except ValueError:
        w = 0
    if not 1 <= w <= MAX_WINDOW_S:
        raise InvalidRequest(f"window must be a number of seconds from 1 to {MAX_WINDOW_S}", param="window")
    return w


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (PostgreSQL's percentile_cont)."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summary(latency: list[float], ttfb: list[float]) -> dict[str, Any]:
    latency, ttfb = sorted(latency), sorted(t for t in ttfb if t >= 0)  # -1: no byte was sent

    def r(v: float | None) -> float | None:
        return round(v, 3) if v is not None else None

    return {"samples": len(latency), "p50_ms": r(percentile(latency, 0.5)),
            "p95_ms": r(percentile(latency, 0.95)), "ttfb_p50_ms": r(percentile(ttfb, 0.5)),
            "ttfb_p95_ms": r(percentile(ttfb, 0.95))}


async def latency(store: Store, registry: Registry, ledger: Ledger | None, *, window_s: int,
                  team: str | None = None, model: str | None = None,
                  teams: tuple[str, ...] | None = None,
                  keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """``teams``/``keys``: read only these (an admin actor limited to them); None: all."""
    since_ms = int(time.time() * 1000) - window_s * 1000
    if ledger is not None:
        args: list[Any] = [dt.datetime.fromtimestamp(since_ms / 1000, dt.UTC)]
        conds = ["ts >= $1"]
        for col, v in (("team", team), ("model", model)):
            if v is not None:
                args.append(v)
                conds.append(f"{col} = ${len(args)}")
        for col, vs in (("team", teams), ("key_id", keys)):
            if vs is not None:
                args.append(list(vs))
                conds.append(f"{col} = ANY(${len(args)}::text[])")
        sql = (f"SELECT latency_ms, ttfb_ms FROM usage_records WHERE {' AND '.join(conds)} "
               f"ORDER BY ts DESC LIMIT {SAMPLE}")
        async with ledger.sink.reading() as conn:
            rows = await conn.fetch(sql, *args)
        lat, ttfb, source = [float(r["latency_ms"]) for r in rows], [float(r["ttfb_ms"]) for r in rows], \
            "ledger"
    else:
        lat, ttfb, source = [], [], "store"
        names = [team] if team else list(teams) if teams is not None else await registry.team_names()
        for t in names:
            if teams is not None and t not in teams:
                continue
            for rec in await store.records(t, SAMPLE):
                if rec.ts_ms >= since_ms and (model is None or rec.model == model) and \
                        (keys is None or rec.key_id in keys):
                    lat.append(rec.latency_ms)
                    ttfb.append(rec.ttfb_ms)
    return {"window_s": window_s, "source": source} | summary(lat, ttfb)
