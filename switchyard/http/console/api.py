"""Admin reads for the console (and scripts): deployments, an overview, latency percentiles.

Same guard as the rest of /admin (the master key, or a console session).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from litestar import Request, Router, get

from switchyard.core.errors import InvalidRequest
from switchyard.http.admin import ADMIN_ERRORS
from switchyard.policies.latency import latency, parse_window
from switchyard.policies.usage_filter import parse_filter
from switchyard.routing.snapshot import snapshot

if TYPE_CHECKING:
    from switchyard.gateway.pipeline import Gateway
    from switchyard.http.admin_auth import AdminAuth
    from switchyard.policies.factory import Policies
    from switchyard.routing.router import Router as GatewayRouter

# range -> (window, bucket with the ledger, bucket without it: the store keeps days only)
RANGES: dict[str, tuple[dt.timedelta, str, str]] = {
    "1h": (dt.timedelta(hours=1), "hour", "day"),
    "24h": (dt.timedelta(hours=24), "hour", "day"),
    "30d": (dt.timedelta(days=30), "day", "day"),
}


def _buckets(start: dt.datetime, end: dt.datetime, bucket: str) -> list[str]:
    """Every bucket label from ``start`` to ``end``, so a chart shows quiet hours as zeros."""
    if bucket == "hour":
        t, step = start.replace(minute=0, second=0, microsecond=0), dt.timedelta(hours=1)
        fmt = "%Y-%m-%dT%H:00:00Z"
    else:
        t, step = dt.datetime.combine(start.date(), dt.time(), dt.UTC), dt.timedelta(days=1)
        fmt = "%Y-%m-%d"
    out = []
    while t <= end:
        out.append(t.strftime(fmt))
        t += step
    return out


async def overview(policies: Policies, rng: str, now: dt.datetime) -> dict[str, Any]:
    if rng not in RANGES:
        raise InvalidRequest(f"range takes {', '.join(RANGES)}", param="range")
    window, ledger_bucket, store_bucket = RANGES[rng]
    start = now - window
    bucket = ledger_bucket if policies.ledger is not None else store_bucket
    if bucket == "hour":
        q = {"from": start.replace(minute=0, second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ"),
             "to": (now + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:00:00Z")}
    else:
        q = {"from": start.date().isoformat(), "to": now.date().isoformat()}
    usage = policies.usage
    series = await usage.query(parse_filter(q | {"group_by": bucket}))
    by_model = await usage.query(parse_filter(q | {"group_by": "model"}))
    by_team = await usage.query(parse_filter(q | {"group_by": "team"}))
    rows = {r[bucket]: r for r in series["data"]}
    empty = {k: 0 for k in series["total"]}
    return {"range": rng, "bucket": bucket, "source": usage.source, "from": q["from"], "to": q["to"],
            "series": [{"t": b} | rows.get(b, empty) for b in _buckets(start, now, bucket)],
            "total": series["total"], "by_model": by_model["data"], "by_team": by_team["data"]}


def console_api(gw: Gateway, router: GatewayRouter, policies: Policies, auth: AdminAuth) -> Router:
    @get("/deployments")
    async def deployments() -> dict[str, Any]:
        """Each deployment's health, circuit, cooldown, latency estimate and recent errors."""
        return {"data": snapshot(router.targets, router.clock()), "inflight": gw.inflight}

    @get("/usage/latency")
    async def usage_latency(request: Request[Any, Any, Any]) -> dict[str, Any]:
        q = request.query_params
        return await latency(policies.store, policies.registry, policies.ledger,
                             window_s=parse_window(q.get("window")), team=q.get("team") or None,
                             model=q.get("model") or None)

    @get("/overview")
    async def get_overview(request: Request[Any, Any, Any]) -> dict[str, Any]:
        """Requests, tokens, spend and errors over a range, by bucket, model and team; latency
        percentiles over the same window; requests in flight on this replica."""
        rng = request.query_params.get("range") or "24h"
        out = await overview(policies, rng, dt.datetime.now(dt.UTC))
        lat = await latency(policies.store, policies.registry, policies.ledger,
                            window_s=int(RANGES[rng][0].total_seconds()))
        return out | {"latency": lat, "inflight": gw.inflight}

    return Router(path="/admin", guards=[auth.guard],
                  route_handlers=[deployments, usage_latency, get_overview], exception_handlers=ADMIN_ERRORS)
