"""Usage queries, answered from the daily aggregates (per team, day, key and model)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from gateway.errors import InvalidRequest
from policies.plan import NANO
from policies.registry import Registry
from policies.store import METRICS, SEP, Store, UsageRecord

GROUPS = ("team", "key", "model", "day")
MAX_DAYS = 400
_EPOCH = dt.date(1970, 1, 1)


def parse_day(s: str | None, default: dt.date | None, param: str) -> dt.date | None:
    if not s:
        return default
    try:
        return dt.date.fromisoformat(s[:10])
    except ValueError:
        raise InvalidRequest(f"{param} must be a date, YYYY-MM-DD", param=param) from None


def _row(metrics: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {m: metrics.get(m, 0) for m in METRICS if m != "cost_nano"}
    out["total_tokens"] = out["prompt_tokens"] + out["completion_tokens"]
    out["cost_usd"] = metrics.get("cost_nano", 0) / NANO
    return out


class UsageQuery:
    def __init__(self, store: Store, registry: Registry) -> None:
        self.store = store
        self.registry = registry

    async def query(self, *, team: str | None = None, key: str | None = None, model: str | None = None,
                    start: dt.date | None = None, end: dt.date | None = None,
                    group_by: tuple[str, ...] = ()) -> dict[str, Any]:
        """Sums over [start, end] (UTC days, inclusive; default today), filtered and grouped."""
        today = dt.datetime.now(dt.UTC).date()
        start, end = start or today, end or start or today
        if end < start or (end - start).days >= MAX_DAYS:
            raise InvalidRequest(f"from..to must be ordered and span at most {MAX_DAYS} days", param="to")
        bad = [g for g in group_by if g not in GROUPS]
        if bad:
            raise InvalidRequest(f"group_by takes {', '.join(GROUPS)}; not {', '.join(bad)}",
                                 param="group_by")
        days = list(range((start - _EPOCH).days, (end - _EPOCH).days + 1))
        teams = [team] if team else await self.registry.team_names()
        groups: dict[tuple[str, ...], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        total: dict[str, int] = defaultdict(int)
        for t in teams:
            for day, fields in (await self.store.aggregates(t, days)).items():
                for f, v in fields.items():
                    k, m, metric = f.split(SEP)
                    if (key and k != key) or (model and m != model):
                        continue
                    attrs = {"team": t, "key": k, "model": m,
                             "day": (_EPOCH + dt.timedelta(days=day)).isoformat()}
                    groups[tuple(attrs[g] for g in group_by)][metric] += int(v)
                    total[metric] += int(v)
        data = [dict(zip(group_by, g, strict=True)) | _row(metrics) for g, metrics in sorted(groups.items())]
        return {"from": start.isoformat(), "to": end.isoformat(), "group_by": list(group_by),
                "data": data, "total": _row(total)}

    async def records(self, team: str, limit: int = 100) -> list[UsageRecord]:
        return await self.store.records(team, limit)
