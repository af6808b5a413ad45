"""The console's overview (``GET /admin/overview``): usage over a range by bucket, model and team,
the requests refused and who they belong to, the requests that named no valid key, and the
guardrails that acted.

Every figure is a grouped read of an aggregate (the ledger's rollups, or the store's day and
minute sums), never a scan of requests, except those that, when there is no ledger, come from the
newest records of each team in the store (at most ``NOW_RECORDS`` each, read once per overview):
the errors, the guardrails, who is refused now (and over the last hour).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from switchyard.core.errors import InvalidRequest
from switchyard.policies.alerts import budget_use, month_spend, month_sums
from switchyard.policies.store import DAY_MS, HOUR_MS, MINUTE_MS, SEP, UsageRecord, refused
from switchyard.policies.usage_filter import UsageFilter, parse_filter

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


async def overview(policies: Policies, rng: str, now: dt.datetime, *, teams: tuple[str, ...] | None = None,
                   keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """``teams``/``keys``: the caller reads only these (None: all, with the unauthenticated counts)."""
    if rng not in RANGES:
        raise InvalidRequest(f"range takes {', '.join(RANGES)}", param="range")
    window, ledger_bucket, store_bucket = RANGES[rng]
    ledger = policies.ledger is not None
    start = now - window
    bucket = ledger_bucket if ledger else store_bucket
    if bucket == "minute" and keys is not None and not ledger:
        bucket = "day"  # the store's minute sums have no keys: a reader of its own keys gets days
    if bucket == "day":
        q = {"from": start.date().isoformat(), "to": now.date().isoformat()}
    else:
        q = {"from": _iso(_floor(start, bucket)), "to": _iso(_floor(now, bucket) + _STEP[bucket])}
    usage = policies.usage
    g = "minute," if bucket == "minute" else ""  # the minute sums are their own source

    def flt(query: dict[str, str]) -> UsageFilter:
        return replace(parse_filter(query), teams=teams, keys=keys)

    # Without a ledger the errors, the guardrails and who is refused all come from these records.
    newest = await _newest(policies, flt({})) if not ledger else {}
    series = await usage.query(flt(q | {"group_by": bucket}))
    by_model = await usage.query(flt(q | {"group_by": g + "model"}))
    by_team = await usage.query(flt(q | {"group_by": g + "team"}))
    rows = {r[bucket]: r for r in series["data"]}
    empty = {k: 0 for k in series["total"]}
    return {"range": rng, "bucket": bucket, "source": usage.source, "from": q["from"], "to": q["to"],
            "timezone": "UTC",
            "series": [{"t": b} | rows.get(b, empty) for b in _buckets(start, now, bucket)],
            "total": series["total"], "by_model": _merge(by_model["data"], "model"),
            "by_team": _merge(by_team["data"], "team"),
            "errors": await errors_by(policies, q, start, flt, newest),
            "refused": await _refused_by(policies, q, bucket, start, flt, newest),
            "refused_now": await refused_now(policies, now, flt, newest),
            "unauthenticated": await unauthenticated(policies, start, now, bucket) if teams is None else {},
            "guardrails": await guardrails(policies, q, start, flt, newest),
            **await budgets(policies, now, teams=teams, keys=keys)}


async def _newest(policies: Policies, scope: UsageFilter) -> dict[str, list[UsageRecord]]:
    """Each of the reader's teams' newest records (at most ``NOW_RECORDS``), newest first."""
    listed = scope.team_list()  # [] (none of the reader's): nothing; None: every team
    return {team: await policies.store.records(team, NOW_RECORDS)
            for team in (listed if listed is not None else await policies.registry.team_names())}


NEAR = 0.5  # budgets at least this full are listed
NEAR_MAX = 50


async def budgets(policies: Policies, now: dt.datetime, *, teams: tuple[str, ...] | None = None,
                  keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The day's and month's quotas at least ``NEAR`` full, fullest first, and each team's spend
    this month with its month-end projection at the pace so far (the store's daily sums); for a
    reader limited to teams, theirs only, and none for a reader of its own keys."""
    if keys is not None:
        return {"budgets": [], "month": []}
    today = now.date()
    sums = await month_sums(policies.store, policies.registry, today, teams)  # each team's, once
    use = await budget_use(policies.store, policies.registry, today, sums=sums)
    near = sorted((u for u in use if u.fraction >= NEAR), key=lambda u: -u.fraction)[:NEAR_MAX]
    month = month_spend(sums, today)
    return {"budgets": [dataclasses.asdict(u) | {"fraction": round(u.fraction, 4)} for u in near],
            "month": month}


async def guardrails(policies: Policies, q: dict[str, str], start: dt.datetime,
                     flt: Callable[[dict[str, str]], UsageFilter],
                     newest: dict[str, list[UsageRecord]]) -> list[dict[str, Any]]:
    """Requests each guardrail acted on over the range, per ``<guard>:<action>`` (docs/guardrails.md):
    from the ledger's records, else from the store's newest records (``newest``)."""
    if policies.ledger is not None:
        rows = (await policies.usage.query(flt(q | {"group_by": "guardrail"})))["data"]
        counts = {r["guardrail"]: r["requests"] for r in rows}
    else:
        counts = defaultdict(int)
        floor_ms = int(start.timestamp() * 1000)
        scope = flt(q)
        for recs in newest.values():
            for rec in recs:
                if rec.ts_ms < floor_ms:
                    break  # newest first
                if not scope.key_ok(rec.key_id):
                    continue
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


async def _refused_by(policies: Policies, q: dict[str, str], bucket: str, start: dt.datetime,
                      flt: Callable[[dict[str, str]], UsageFilter],
                      newest: dict[str, list[UsageRecord]]) -> list[dict[str, Any]]:
    """Who was refused over the range: per team and key (and reason, with the ledger, or for
    the last hour from the store's newest records)."""
    if policies.ledger is not None:
        groups = ("minute," if bucket == "minute" else "") + "team,key,reason"
    elif bucket == "minute":  # the store's minute sums have no keys: its records do
        return [{k: v for k, v in r.items() if k != "last"} for r in _recent(start, flt({}), newest)]
    else:
        groups = "team,key"
    rows = (await policies.usage.query(flt(q | {"group_by": groups})))["data"]
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in rows:
        if not r["refused"]:
            continue
        k = (r["team"], r["key"], r.get("reason", ""))
        acc = out.setdefault(k, {"team": k[0], "key": k[1], "reason": k[2], "refused": 0})
        acc["refused"] += r["refused"]
    return sorted(out.values(), key=lambda x: (-x["refused"], x["team"], x["key"], x["reason"]))


def side_of(status: int, deployment: str) -> str:
    """Who an error is down to: ``upstream`` (a deployment was called: its failure, or one the
    gateway made of it), ``refused`` (the gateway's own 4xx before any call), ``gateway`` (a 5xx
    with no call: a model loading, the store down, a bug)."""
    if deployment:
        return "upstream"
    return "refused" if status < 500 else "gateway"


async def errors_by(policies: Policies, q: dict[str, str], start: dt.datetime,
                    flt: Callable[[dict[str, str]], UsageFilter],
                    newest: dict[str, list[UsageRecord]]) -> dict[str, Any]:
    """The errors over the range by side, status and deployment, so that upstream failures
    show apart from refusals. The ledger groups them over the whole range; without it the
    store's newest records of each team (``newest``, at most ``NOW_RECORDS`` each: ``sampled``
    says whether a team had more in the range than were read)."""
    out: dict[tuple[str, int, str], int] = defaultdict(int)
    sampled = False
    if policies.ledger is not None:
        for r in (await policies.usage.query(flt(q | {"group_by": "status,deployment"})))["data"]:
            if r["errors"]:
                dep = r["deployment"] or ""
                out[(side_of(r["status"], dep), r["status"], dep)] += r["errors"]
    else:
        floor_ms = int(start.timestamp() * 1000)
        f = flt(q)
        for recs in newest.values():
            sampled |= len(recs) == NOW_RECORDS and recs[-1].ts_ms >= floor_ms
            for rec in recs:
                if rec.ts_ms < floor_ms:
                    break  # newest first
                if rec.status >= 400 and f.key_ok(rec.key_id):
                    out[(side_of(rec.status, rec.deployment), rec.status, rec.deployment)] += 1
    ranked = sorted(out.items(), key=lambda kv: (-kv[1], kv[0]))
    rows = [{"side": k[0], "status": k[1], "deployment": k[2], "errors": n} for k, n in ranked]
    return {"data": rows, "sampled": sampled}


async def refused_now(policies: Policies, now: dt.datetime, flt: Callable[[dict[str, str]], UsageFilter],
                      newest: dict[str, list[UsageRecord]]) -> list[dict[str, Any]]:
    """Refusals in the last five minutes per team, key and reason, with the newest one's time."""
    since = now - NOW
    out: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add(team: str, key: str, reason: str, n: int, last: str) -> None:
        acc = out.setdefault((team, key, reason), {"team": team, "key": key, "reason": reason,
                                                   "refused": 0, "last": last})
        acc["refused"] += n
        acc["last"] = max(acc["last"], last)

    if policies.ledger is None:
        return _recent(since, flt({}), newest)
    q = {"from": _iso(_floor(since, "minute")), "to": _iso(_floor(now, "minute") + _STEP["minute"]),
         "group_by": "minute,team,key,reason"}
    for r in (await policies.usage.query(flt(q)))["data"]:
        if r["refused"]:
            add(r["team"], r["key"], r["reason"], r["refused"], r["minute"])
    return sorted(out.values(), key=lambda x: (-x["refused"], x["team"], x["key"], x["reason"]))


def _recent(since: dt.datetime, scope: UsageFilter,
            newest: dict[str, list[UsageRecord]]) -> list[dict[str, Any]]:
    """Refusals since ``since`` from the store's newest records (``newest``)."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    floor_ms = int(since.timestamp() * 1000)
    for team, recs in newest.items():
        for rec in recs:
            if rec.ts_ms < floor_ms:
                break  # newest first
            if refused(rec.status, rec.attempts) and scope.key_ok(rec.key_id):
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
