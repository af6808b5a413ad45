"""The operators' console: ``GET /ui`` (pages.py) and the admin reads it needs beyond the
policies' own admin API (api.py). Every asset ships in ``static/``; nothing is fetched elsewhere."""

from __future__ import annotations

from typing import Any

from gateway.console.api import console_api
from gateway.console.pages import console_pages

__all__ = ["console_routes"]


def console_routes(gw: Any, router: Any, policies: Any) -> list[Any]:
    """The route handlers to add to the app: the pages, and /admin/{deployments,overview,usage/latency}."""
    return [console_pages(policies.auth), console_api(gw, router, policies)]
