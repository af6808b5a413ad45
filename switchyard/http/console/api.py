"""Admin reads for the console (and scripts): deployments, an overview, latency percentiles.

Same guard as the rest of /admin; reads are narrowed to the caller's teams (and a member's keys).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from litestar import Request, Router, get, post

from switchyard.core.errors import InvalidRequest, NotFound
from switchyard.http.admin import ADMIN_ERRORS, json_body, scoped
from switchyard.http.admin_auth import actor_of
from switchyard.http.console.overview import RANGES, overview
from switchyard.policies.latency import latency, parse_window
from switchyard.policies.usage_filter import UsageFilter
from switchyard.routing.snapshot import target_snapshot

if TYPE_CHECKING:
    from switchyard.gateway.pipeline import Gateway
    from switchyard.http.admin_auth import AdminAuth
    from switchyard.policies.factory import Policies
    from switchyard.routing.resolve import Target
    from switchyard.routing.router import Router as GatewayRouter


def _public_url(url: str | None) -> str | None:
    """A base URL without what may carry a secret: user info, query, fragment."""
    if not url:
        return None
    u = urlsplit(url)
    return urlunsplit((u.scheme, u.hostname + (f":{u.port}" if u.port else "") if u.hostname else u.netloc,
                       u.path, "", ""))


def _deployment(t: Target) -> dict[str, Any]:
    d = t.deployment
    return {"base_url": _public_url(d.base_url), "upstream_model": d.upstream_model(t.model.name),
            "weight": d.weight, "provider": d.provider if d.backend == "upstream" else None}


def console_api(gw: Gateway, router: GatewayRouter, policies: Policies, auth: AdminAuth) -> Router:
    @get("/deployments")
    async def deployments() -> dict[str, Any]:
        """Each deployment's health, circuit, cooldown, latency estimate and recent errors."""
        now = router.clock()
        data = [target_snapshot(t, now) | _deployment(t) for t in router.targets]
        return {"data": data, "inflight": gw.inflight}

    @post("/deployments/reset", status_code=200)
    async def reset_deployment(request: Request[Any, Any, Any]) -> dict[str, Any]:
        """Close a deployment's circuit breaker (cooldown and Retry-After hold included) at once;
        body ``{"deployment": "group/deployment"}``. This replica only (breakers are per replica)."""
        name = (await json_body(request, ("deployment",))).get("deployment")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("deployment: give the deployment's name (group/deployment)",
                                 param="deployment")
        before = next((target_snapshot(t, router.clock()) for t in router.targets if t.name == name), None)
        t = router.reset(name)
        if t is None:
            raise NotFound(f"deployment: no deployment {name[:200]!r}", param="deployment")
        after = target_snapshot(t, router.clock())
        await auth.record(request, "deployment.reset", name, before=before, after=after)
        return after

    async def scope_of(request: Request[Any, Any, Any]) -> UsageFilter:
        """What the caller may read, as a filter's team, teams and keys (None: all)."""
        return await scoped(policies.registry, actor_of(request),
                            UsageFilter(team=request.query_params.get("team") or None))

    @get("/usage/latency")
    async def usage_latency(request: Request[Any, Any, Any]) -> dict[str, Any]:
        q = request.query_params
        s = await scope_of(request)
        return await latency(policies.store, policies.registry, policies.ledger,
                             window_s=parse_window(q.get("window")), team=s.team, teams=s.teams,
                             keys=s.keys, model=q.get("model") or None)

    @get("/overview")
    async def get_overview(request: Request[Any, Any, Any]) -> dict[str, Any]:
        """Requests, tokens, spend and errors over a range, by bucket, model and team; latency
        percentiles over the same window; requests in flight on this replica. An actor limited to
        teams (or its own keys) sees only those, and no count of requests without a key."""
        rng = request.query_params.get("range") or "24h"
        s = await scope_of(request)
        out = await overview(policies, rng, dt.datetime.now(dt.UTC), teams=s.teams, keys=s.keys)
        lat = await latency(policies.store, policies.registry, policies.ledger,
                            window_s=int(RANGES[rng][0].total_seconds()), teams=s.teams, keys=s.keys)
        return out | {"latency": lat, "inflight": gw.inflight if s.teams is None else None}

    return Router(path="/admin", guards=[auth.guard],
                  route_handlers=[deployments, reset_deployment, usage_latency, get_overview],
                  exception_handlers=ADMIN_ERRORS)
