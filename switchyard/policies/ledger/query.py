"""Usage queries answered by the ledger: aggregates from ``usage_hourly``, raw rows from
``usage_records`` (keyset pages, newest first). Same shapes as ``switchyard.policies.usage.UsageQuery``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from switchyard.core.errors import InvalidRequest
from switchyard.policies.ledger.sink import PgSink
from switchyard.policies.usage import usage_row
from switchyard.policies.usage_filter import UsageFilter, encode_cursor

_GROUP_SQL = {
    "team": "team", "key": "key_id", "model": "model", "deployment": "deployment", "status": "status",
    "day": "to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
    "hour": "to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:00:00\"Z\"')",
    "minute": "to_char(minute AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:00\"Z\"')",
    "reason": "reason",
}
_METRICS = ("requests", "errors", "refused", "prompt_tokens", "completion_tokens", "cached_tokens",
            "cost_nano", "cache_write_tokens", "unpriced", "cache_hits", "saved_tokens", "saved_nano")
_RECORD = ("ts_ms", "key_id", "team", "model", "deployment", "prompt_tokens", "completion_tokens",
           "cached_tokens", "cost_nano", "status", "latency_ms", "request_id", "ticket_id", "endpoint",
           "dialect", "requested_model", "attempts", "ttfb_ms", "cut", "reason", "cache_write_tokens",
           "unpriced", "tags", "end_user", "session", "guardrails", "cache_hit", "saved_tokens", "saved_nano")
# What only the records keep (the rollups keep no tag, end user, session or guard) is summed from
# them. A list column (tags; guardrails: each guard and action that acted) is unnested: a request
# with two tags is in both tags' rows.
_RAW_GROUP_SQL = {**_GROUP_SQL, "tag": "tag", "end_user": "end_user", "session": "session",
                  "guardrail": "guardrail",
                  "day": "to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
                  "hour": "to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:00:00\"Z\"')",
                  "minute": "to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:00\"Z\"')"}
_UNNESTED = {"tag": "tags", "guardrail": "guardrails"}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# The rollups' sums, from raw records.
_RECORD_SUMS = ("count(*) AS requests", "count(*) FILTER (WHERE status >= 400) AS errors",
                "count(*) FILTER (WHERE status BETWEEN 400 AND 499 AND attempts = 0) AS refused",
                "count(*) FILTER (WHERE unpriced) AS unpriced",
                "count(*) FILTER (WHERE cache_hit) AS cache_hits",
                *(f"sum({c})::bigint AS {c}" for c in ("prompt_tokens", "completion_tokens", "cached_tokens",
                                                       "cost_nano", "cache_write_tokens", "saved_tokens",
                                                       "saved_nano")))


def _where(f: UsageFilter, time_col: str, args: list[Any]) -> str:
    """The filter's SQL conditions, appending their parameters to ``args``."""
    conds = []

    def arg(v: Any) -> str:
        args.append(v)
        return f"${len(args)}"

    for col, v in (("team", f.team), ("key_id", f.key), ("model", f.model), ("end_user", f.end_user),
                   ("session", f.session)):
        if v is not None:
            conds.append(f"{col} = {arg(v)}")
    if f.tag is not None:
        conds.append(f"{arg(f.tag)} = ANY(string_to_array(tags, ','))")
    for col, vs in (("team", f.teams), ("key_id", f.keys)):
        if vs is not None:
            conds.append(f"{col} = ANY({arg(list(vs))}::text[])")
    if f.status:
        ranges = [f"status BETWEEN {arg(lo)} AND {arg(hi)}" for lo, hi in f.status]
        conds.append("(" + " OR ".join(ranges) + ")")
    if f.start is not None:
        conds.append(f"{time_col} >= {arg(f.start)}")
    if f.end is not None:
        conds.append(f"{time_col} < {arg(f.end)}")
    return " AND ".join(conds) or "true"


def _row(metrics: dict[str, Any]) -> dict[str, Any]:
    m = {k: int(metrics.get(k) or 0) for k in _METRICS}
    n = m["requests"]
    avg = round(float(metrics.get("latency_ms") or 0) / n, 3) if n else 0.0
    return usage_row(m) | {"cost_nano": m["cost_nano"], "latency_ms_avg": avg}


def _day_or_instant(t: dt.datetime | None, f: UsageFilter, end: bool) -> str:
    if t is None:
        return ""
    if f.instants:
        return t.isoformat().replace("+00:00", "Z")
    return (t - dt.timedelta(days=1) if end else t).date().isoformat()


class LedgerUsage:
    source = "ledger"

    def __init__(self, sink: PgSink) -> None:
        self.sink = sink

    async def query(self, f: UsageFilter) -> dict[str, Any]:
        if "guardrail" in f.group_by and f.dimension() is not None:
            raise InvalidRequest("group_by=guardrail cannot be combined with tag, end_user or session",
                                 param="group_by")
        if f.dimension() is not None or "guardrail" in f.group_by:
            return await self._by_records(f)
        args: list[Any] = []
        # By minute: the minute rollup (the last two days; no deployment), else the hourly one.
        table, time_col = ("usage_minute", "minute") if "minute" in f.group_by else ("usage_hourly", "hour")
        if table == "usage_minute" and "deployment" in f.group_by:
            raise InvalidRequest("group_by=minute cannot be combined with deployment", param="group_by")
        where = _where(f, time_col, args)
        groups = [f"{_GROUP_SQL[g]} AS g{i}" for i, g in enumerate(f.group_by)]
        sums = [f"sum({m})::bigint AS {m}" for m in _METRICS] + ["sum(latency_ms) AS latency_ms"]
        sql = f"SELECT {', '.join(groups + sums)} FROM {table} WHERE {where}"
        if groups:
            order = ", ".join(f"g{i}" for i in range(len(groups)))
            sql += f" GROUP BY {order} ORDER BY {order}"
        async with self.sink.reading() as conn:
            rows = await conn.fetch(sql, *args)
        data, total = [], dict.fromkeys((*_METRICS, "latency_ms"), 0)
        for r in rows:
            if not r["requests"]:
                continue  # no group and no rows: sum() of nothing
            data.append({g: r[f"g{i}"] for i, g in enumerate(f.group_by)} | _row(dict(r)))
            for k in total:
                total[k] += r[k] or 0
        return {"from": _day_or_instant(f.start, f, False), "to": _day_or_instant(f.end, f, True),
                "group_by": list(f.group_by), "data": data, "total": _row(total)}

    async def _by_records(self, f: UsageFilter) -> dict[str, Any]:
        """Grouped or filtered by tag, end user, session or guardrail: summed from usage_records
        (a request with two tags is in both tags' rows; the total counts it once)."""
        if "minute" in f.group_by and f.dimension() is not None:
            raise InvalidRequest("group_by=minute cannot be combined with tag, end_user or session",
                                 param="group_by")
        args: list[Any] = []
        where = every = _where(f, "ts", args)
        sums = ", ".join([*_RECORD_SUMS, "sum(latency_ms) AS latency_ms"])
        groups = [f"{_RAW_GROUP_SQL[g]} AS g{i}" for i, g in enumerate(f.group_by)]
        source = "usage_records"
        for g, column in _UNNESTED.items():
            if g in f.group_by:
                source += f" CROSS JOIN LATERAL unnest(string_to_array(nullif({column}, ''), ',')) AS {g}"
        for d in ("end_user", "session"):
            if d in f.group_by:
                where += f" AND {d} <> ''"
        sql = f"SELECT {', '.join([*groups, sums])} FROM {source} WHERE {where}"
        if groups:
            order = ", ".join(f"g{i}" for i in range(len(groups)))
            sql += f" GROUP BY {order} ORDER BY {order}"
        async with self.sink.reading() as conn:
            rows = await conn.fetch(sql, *args)
            total = await conn.fetchrow(f"SELECT {sums} FROM usage_records WHERE {every}", *args)
        data = [{g: r[f"g{i}"] for i, g in enumerate(f.group_by)} | _row(dict(r))
                for r in rows if r["requests"]]
        return {"from": _day_or_instant(f.start, f, False), "to": _day_or_instant(f.end, f, True),
                "group_by": list(f.group_by), "data": data, "total": _row(dict(total or {}))}

    async def records(self, f: UsageFilter) -> dict[str, Any]:
        args: list[Any] = []
        where = _where(f, "ts", args)
        if f.cursor is not None:
            args += [_EPOCH + dt.timedelta(microseconds=f.cursor[0]), f.cursor[1]]
            where += f" AND (ts, ticket_id) < (${len(args) - 1}, ${len(args)})"
        args.append(f.limit + 1)
        sql = (f"SELECT * FROM usage_records WHERE {where} ORDER BY ts DESC, ticket_id DESC "
               f"LIMIT ${len(args)}")
        async with self.sink.reading() as conn:
            rows = await conn.fetch(sql, *args)
        page = rows[:f.limit]
        data = []
        for r in page:
            d = dict(r)
            ts: dt.datetime = d.pop("ts")
            d["ts_ms"] = (ts - _EPOCH) // dt.timedelta(milliseconds=1)
            data.append({k: d[k] for k in _RECORD})
        nxt = None
        if len(rows) > f.limit:
            last = page[-1]
            nxt = encode_cursor((last["ts"] - _EPOCH) // dt.timedelta(microseconds=1), last["ticket_id"])
        return {"data": data, "next_cursor": nxt}
