"""The operators' console: ``GET /ui`` (pages.py) and the admin reads it needs beyond the
policies' own admin API (api.py). Every asset ships in ``static/``; nothing is fetched elsewhere."""

from __future__ import annotations

from typing import TYPE_CHECKING

from litestar import Router

from switchyard.http.console.api import console_api
from switchyard.http.console.pages import console_pages
from switchyard.policies.factory import state_kept

if TYPE_CHECKING:
    from switchyard.gateway.pipeline import Gateway
    from switchyard.http.admin_auth import AdminAuth
    from switchyard.policies.factory import Policies
    from switchyard.routing.router import Router as GatewayRouter

__all__ = ["console_routes"]


def console_routes(gw: Gateway, router: GatewayRouter, policies: Policies, auth: AdminAuth) -> list[Router]:
    """The route handlers to add to the app: the pages, and /admin/{deployments,overview,usage/latency}."""
    return [console_pages(auth, state_kept(policies.config.store.url) is not None),
            console_api(gw, router, policies, auth)]
