"""Usage queries answered by the store: its daily aggregates (per team, day, key and model) and
its per-team record streams. ``switchyard.policies.ledger.query`` answers the same queries from the ledger."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from typing import Any, Protocol

from switchyard.core.errors import InvalidRequest
from switchyard.policies.attribution import MARK
from switchyard.policies.plan import NANO
from switchyard.policies.registry import Registry
from switchyard.policies.store import HOUR_MS, METRICS, MINUTE_MS, SEP, Store
from switchyard.policies.usage_filter import UsageFilter

_EPOCH = dt.date(1970, 1, 1)


class UsageSource(Protocol):
    source: str  # "store" or "ledger"

    async def query(self, f: UsageFilter) -> dict[str, Any]:
        """``{"from", "to", "group_by", "data": [...], "total": {...}}`` (docs/policies.md)."""
        ...

    async def records(self, f: UsageFilter) -> dict[str, Any]:
        """``{"data": [record fields...], "next_cursor": str | None}``, newest first."""
        ...


def usage_row(metrics: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {m: metrics.get(m, 0) for m in METRICS if m not in ("cost_nano", "saved_nano")}
    out["total_tokens"] = out["prompt_tokens"] + out["completion_tokens"]
    out["cost_usd"] = metrics.get("cost_nano", 0) / NANO
    out["saved_usd"] = metrics.get("saved_nano", 0) / NANO
    return out


class UsageQuery:
    source = "store"

    def __init__(self, store: Store, registry: Registry) -> None:
        self.store = store
        self.registry = registry

    @staticmethod
    def _check(f: UsageFilter) -> None:
        bad = f.ledger_only()
        if bad:
            raise InvalidRequest(f"{', '.join(bad)}: needs the usage ledger (usage.ledger)",
                                 param=bad[0].split("=")[0].split(" ")[0])

    async def query(self, f: UsageFilter) -> dict[str, Any]:
        """Sums over the UTC days [start_day, end_day], filtered and grouped; with
        group_by=minute, over the minutes in [start, end) still kept (the last two hours)."""
        self._check(f)
        if "minute" in f.group_by:
            return await self._minutes(f)
        start, end = f.start_day, f.end_day
        assert start is not None and end is not None
        days = list(range((start - _EPOCH).days, (end - _EPOCH).days + 1))
        teams = f.team_list()
        groups: dict[tuple[str, ...], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        total: dict[str, int] = defaultdict(int)
        # Tags, end users and sessions have sums of their own ("\x1e<dimension>:<value>" in the
        # key's place; store.DIMENSION_DAYS); a request with two tags is in both tags' rows.
        dim = f.dimension()
        mark = f"{MARK}{dim}:" if dim else None
        want = getattr(f, dim) if dim else None
        if mark is not None and (f.key or f.keys is not None):
            # The store's dimension sums are per (team, model): no key.
            raise InvalidRequest(f"by {dim} the store keeps teams and models, not keys: add a ledger "
                                 "(usage.ledger) for keys", param="key")
        for t in teams if teams is not None else await self.registry.team_names():
            if mark is not None:
                for day, fields in (await self.store.aggregates(t, days, dimensions=True)).items():
                    day_s = (_EPOCH + dt.timedelta(days=day)).isoformat()
                    for field, v in fields.items():
                        k, m, metric = field.split(SEP)
                        if not k.startswith(mark) or (f.model and m != f.model):
                            continue
                        value = k[len(mark):]
                        if want is not None and value != want:
                            continue
                        attrs = {"team": t, "model": m, "day": day_s, str(dim): value}
                        groups[tuple(attrs[g] for g in f.group_by)][metric] += int(v)
                        if want is not None:  # one value asked for: its requests are the total
                            total[metric] += int(v)
                if want is not None:
                    continue
            # Grouped by a dimension (no value asked for): the total is every request's.
            for day, fields in (await self.store.aggregates(t, days)).items():
                day_s = (_EPOCH + dt.timedelta(days=day)).isoformat()
                for field, v in fields.items():
                    k, m, metric = field.split(SEP)
                    if not f.key_ok(k) or (f.model and m != f.model):
                        continue
                    total[metric] += int(v)
                    if mark is None:
                        attrs = {"team": t, "key": k, "model": m, "day": day_s}
                        groups[tuple(attrs[g] for g in f.group_by)][metric] += int(v)
        data = [dict(zip(f.group_by, g, strict=True)) | usage_row(metrics)
                for g, metrics in sorted(groups.items())]
        return {"from": start.isoformat(), "to": end.isoformat(), "group_by": list(f.group_by),
                "data": data, "total": usage_row(total)}

    async def _minutes(self, f: UsageFilter) -> dict[str, Any]:
        # The minute sums are per (team, model): no key.
        if f.key or f.keys is not None or "key" in f.group_by:
            raise InvalidRequest("by minute the store keeps teams and models, not keys: add a ledger "
                                 "(usage.ledger) for keys", param="key")
        assert f.start is not None and f.end is not None
        lo, hi = int(f.start.timestamp() * 1000), int(f.end.timestamp() * 1000)
        hours = list(range(lo // HOUR_MS, (hi - 1) // HOUR_MS + 1))[-3:]
        teams = f.team_list()
        groups: dict[tuple[str, ...], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        total: dict[str, int] = defaultdict(int)
        for t in teams if teams is not None else await self.registry.team_names():
            for field, v in (await self.store.minutes(t, hours)).items():
                minute, m, metric = field.split(SEP)
                at = int(minute) * MINUTE_MS
                if not lo <= at < hi or (f.model and m != f.model):
                    continue
                stamp = dt.datetime.fromtimestamp(at / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:00Z")
                attrs = {"team": t, "model": m, "minute": stamp, "day": stamp[:10]}
                groups[tuple(attrs[g] for g in f.group_by)][metric] += int(v)
                total[metric] += int(v)
        data = [dict(zip(f.group_by, g, strict=True)) | usage_row(metrics)
                for g, metrics in sorted(groups.items())]
        return {"from": f.start.isoformat().replace("+00:00", "Z"),
                "to": f.end.isoformat().replace("+00:00", "Z"), "group_by": list(f.group_by),
                "data": data, "total": usage_row(total)}

    async def records(self, f: UsageFilter) -> dict[str, Any]:
        self._check(f)
        bad = [p for p, v in (("key", f.key), ("model", f.model), ("from", f.start), ("to", f.end),
                              ("tag", f.tag), ("end_user", f.end_user), ("session", f.session)) if v]
        if bad:
            raise InvalidRequest(f"{', '.join(bad)}: filtering records needs the usage ledger "
                                 "(usage.ledger)", param=bad[0])
        if not f.team:
            raise InvalidRequest("team is required", param="team")
        if f.team_list() == []:
            return {"data": [], "next_cursor": None}
        recs = await self.store.records(f.team, f.limit)
        return {"data": [dataclasses.asdict(r) for r in recs if f.key_ok(r.key_id)], "next_cursor": None}
