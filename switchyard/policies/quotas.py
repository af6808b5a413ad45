"""``switchyard_team_quota_remaining``: what is left of each team's daily and monthly quotas,
read at scrape time from the store's usage aggregates (the figures the admin API's usage
endpoints sum; requests in flight are not in them yet)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from switchyard.policies.plan import NANO
from switchyard.policies.registry import Registry
from switchyard.policies.store import SEP, Store, StoreDown

QUOTAS = ("tokens_per_day", "tokens_per_month", "spend_per_day", "spend_per_month")
MAX_TEAMS = 500  # a scrape reads at most this many teams' aggregates


def _used(fields: dict[str, Any], spend: bool) -> float:
    total = 0
    for field, v in fields.items():
        metric = field.rsplit(SEP, 1)[-1]
        if (metric == "cost_nano") if spend else metric in ("prompt_tokens", "completion_tokens"):
            total += int(v)
    return total / NANO if spend else total


async def quota_family(store: Store, registry: Registry) -> GaugeMetricFamily:
    fam = GaugeMetricFamily("switchyard_team_quota_remaining", "What is left of a team's quota "
                            "(tokens, or USD for spend quotas), from settled usage", labels=["team", "quota"])
    today = dt.datetime.now(dt.UTC).date()
    epoch = dt.date(1970, 1, 1)
    day = (today - epoch).days
    month = list(range((today.replace(day=1) - epoch).days, day + 1))
    try:
        for name in (await registry.team_names())[:MAX_TEAMS]:
            limits = (await registry.team(name))["limits"]
            if not any(limits.get(q) for q in QUOTAS):
                continue
            aggs = await store.aggregates(name, month)
            for q in QUOTAS:
                limit = limits.get(q)
                if not limit:
                    continue
                spend = q.startswith("spend")
                days = [day] if q.endswith("day") else month
                used = sum(_used(aggs.get(d, {}), spend) for d in days)
                fam.add_metric([name, q], max(limit - used, 0))
    except StoreDown:
        pass  # switchyard_store_up says so
    return fam
