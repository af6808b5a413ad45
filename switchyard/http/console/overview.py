"""The console's overview (``GET /admin/overview``): usage over a range by bucket, model and team,
the requests refused and who they belong to, the requests that named no valid key, and the
guardrails that acted.

Every figure is a grouped read of an aggregate (the ledger's rollups, or the store's day and
minute sums), never a scan of requests, except "refused now", which reads the newest records of
each team from the store (at most ``NOW_RECORDS`` each) when there is no ledger.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from switchyard.core.errors import InvalidRequest
from switchyard.policies.store import DAY_MS, HOUR_MS, MINUTE_MS, SEP, refused
from switchyard.policies.usage_filter import parse_filter

if TYPE_CHECKING:
    from switchyard.policies.factory import Policies

# range -> (window, bucket with the ledger, bucket without it: the store keeps days, and minutes
# for the last two hours)
RANGES: dict[str, tuple[dt.timedelta, str, str]] = {
    "1h": (dt.timedelta(hours=1), "minute", "minute"),
    "24h": (dt.timedelta(hours=24), "hour", "day"),
    "30d": (dt.timedelta(days=30), "day", "day"),
}
NOW = dt.timedelta(minutes=5)  # "refused right now" looks this far back
NOW_RECORDS = 1000
_FMT = {"minute": "%Y-%m-%dT%H:%M:00Z", "hour": "%Y-%m-%dT%H:00:00Z", "day": "%Y-%m-%d"}
_STEP = {"minute": dt.timedelta(minutes=1), "hour": dt.timedelta(hours=1), "day": dt.timedelta(days=1)}


def _floor(t: dt.datetime, bucket: str) -> dt.datetime:
    if bucket == "minute":
        return t.replace(second=0, microsecond=0)
    if bucket == "hour":
        return t.replace(minute=0, second=0, microsecond=0)
    return dt.datetime.combine(t.date(), dt.time(), dt.UTC)


def _buckets(start: dt.datetime, end: dt.datetime, bucket: str) -> list[str]:
    """Every bucket label from ``start`` to ``end``, so a chart shows quiet times as zeros."""
    t, out = _floor(start, bucket), []
    while t <= end:
        out.append(t.strftime(_FMT[bucket]))
        t += _STEP[bucket]
    return out


def _iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


async def overview(policies: Policies, rng: str, now: dt.datetime) -> dict[str, Any]:
    if rng not in RANGES:
        raise InvalidRequest(f"range takes {', '.join(RANGES)}", param="range")
    window, ledger_bucket, store_bucket = RANGES[rng]
    ledger = policies.ledger is not None
    start = now - window
    bucket = ledger_bucket if ledger else store_bucket
    if bucket == "day":
        q = {"from": start.date().isoformat(), "to": now.date().isoformat()}
    else:
        q = {"from": _iso(_floor(start, bucket)), "to": _iso(_floor(now, bucket) + _STEP[bucket])}
    usage = policies.usage
    g = "minute," if bucket == "minute" else ""  # the minute sums are their own source
    series = await usage.query(parse_filter(q | {"group_by": bucket}))
    by_model = await usage.query(parse_filter(q | {"group_by": g + "model"}))
    by_team = await usage.query(parse_filter(q | {"group_by": g + "team"}))
    rows = {r[bucket]: r for r in series["data"]}
    empty = {k: 0 for k in series["total"]}
    return {"range": rng, "bucket": bucket, "source": usage.source, "from": q["from"], "to": q["to"],
            "timezone": "UTC",
            "series": [{"t": b} | rows.get(b, empty) for b in _buckets(start, now, bucket)],
            "total": series["total"], "by_model": _merge(by_model["data"], "model"),
            "by_team": _merge(by_team["data"], "team"),
            "refused": await _refused_by(policies, q, bucket, start),
            "refused_now": await refused_now(policies, now),
            "unauthenticated": await unauthenticated(policies, start, now, bucket),
            "guardrails": await guardrails(policies, q, start)}


async def guardrails(policies: Policies, q: dict[str, str], start: dt.datetime) -> list[dict[str, Any]]:
    """Requests each guardrail acted on over the range, per ``<guard>:<action>`` (docs/guardrails.md):
    from the ledger's records, else from the store's newest records (``NOW_RECORDS`` per team)."""
    if policies.ledger is not None:
        rows = (await policies.usage.query(parse_filter(q | {"group_by": "guardrail"})))["data"]
        counts = {r["guardrail"]: r["requests"] for r in rows}
    else:
        counts = defaultdict(int)
        floor_ms = int(start.timestamp() * 1000)
        for team in await policies.registry.team_names():
            for rec in await policies.store.records(team, NOW_RECORDS):
                if rec.ts_ms < floor_ms:
                    break  # newest first
                for g in filter(None, rec.guardrails.split(",")):
                    counts[g] += 1
    return [{"guardrail": g, "requests": n} for g, n in sorted(counts.items(), key=lambda x: (-x[1], x[0]))]


def _merge(rows: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Rows grouped by (minute, name) summed over the minutes."""
    if not rows or "minute" not in rows[0]:
        return rows
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        acc = out.setdefault(r[name], {name: r[name]})
        for k, v in r.items():
            if k not in (name, "minute"):
                acc[k] = acc.get(k, 0) + v
    return [out[k] for k in sorted(out)]


async def _refused_by(policies: Policies, q: dict[str, str], bucket: str,
                      start: dt.datetime) -> list[dict[str, Any]]:
    """Who was refused over the range: per team and key (and reason, with the ledger, or for
    the last hour from the store's newest records)."""
    if policies.ledger is not None:
        groups = ("minute," if bucket == "minute" else "") + "team,key,reason"
    elif bucket == "minute":  # the store's minute sums have no keys: its records do
        return [{k: v for k, v in r.items() if k != "last"} for r in await _recent(policies, start)]
    else:
        groups = "team,key"
    rows = (await policies.usage.query(parse_filter(q | {"group_by": groups})))["data"]
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in rows:
        if not r["refused"]:
            continue
        k = (r["team"], r["key"], r.get("reason", ""))
        acc = out.setdefault(k, {"team": k[0], "key": k[1], "reason": k[2], "refused": 0})
        acc["refused"] += r["refused"]
    return sorted(out.values(), key=lambda x: (-x["refused"], x["team"], x["key"], x["reason"]))


async def refused_now(policies: Policies, now: dt.datetime) -> list[dict[str, Any]]:
    """Refusals in the last five minutes per team, key and reason, with the newest one's time."""
    since = now - NOW
    out: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add(team: str, key: str, reason: str, n: int, last: str) -> None:
        acc = out.setdefault((team, key, reason), {"team": team, "key": key, "reason": reason,
                                                   "refused": 0, "last": last})
        acc["refused"] += n
        acc["last"] = max(acc["last"], last)

    if policies.ledger is None:
        return await _recent(policies, since)
    q = {"from": _iso(_floor(since, "minute")), "to": _iso(_floor(now, "minute") + _STEP["minute"]),
         "group_by": "minute,team,key,reason"}
    for r in (await policies.usage.query(parse_filter(q)))["data"]:
        if r["refused"]:
            add(r["team"], r["key"], r["reason"], r["refused"], r["minute"])
    return sorted(out.values(), key=lambda x: (-x["refused"], x["team"], x["key"], x["reason"]))


async def _recent(policies: Policies, since: dt.datetime) -> list[dict[str, Any]]:
    """Refusals since ``since`` from the store's newest records (``NOW_RECORDS`` per team)."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    floor_ms = int(since.timestamp() * 1000)
    for team in await policies.registry.team_names():
        for rec in await policies.store.records(team, NOW_RECORDS):
            if rec.ts_ms < floor_ms:
                break  # newest first
            if refused(rec.status, rec.attempts):
                last = _iso(dt.datetime.fromtimestamp(rec.ts_ms / 1000, dt.UTC))
                acc = out.setdefault((team, rec.key_id, rec.reason), {
                    "team": team, "key": rec.key_id, "reason": rec.reason, "refused": 0, "last": last})
                acc["refused"] += 1
                acc["last"] = max(acc["last"], last)
    return sorted(out.values(), key=lambda x: (-x["refused"], x["team"], x["key"], x["reason"]))


async def unauthenticated(policies: Policies, start: dt.datetime, now: dt.datetime,
                          bucket: str) -> dict[str, int]:
    """Requests that named no valid key, per reason, over the range (counted, never recorded)."""
    lo, hi = int(start.timestamp() * 1000), int(now.timestamp() * 1000)
    if bucket == "minute":
        counts = await policies.store.unauthenticated([], [lo // HOUR_MS, hi // HOUR_MS])
    else:
        counts = await policies.store.unauthenticated(list(range(lo // DAY_MS, hi // DAY_MS + 1)), [])
    out: dict[str, int] = defaultdict(int)
    for field, n in counts.items():
        head, reason = field.split(SEP, 1)
        if head[0] == "m" and not lo // MINUTE_MS <= int(head[1:]) <= hi // MINUTE_MS:
            continue
        out[reason] += n
    return dict(sorted(out.items()))
