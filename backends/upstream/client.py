"""One pooled HTTP client per deployment.

httpx is the interface (and respx mocks it in tests); underneath, aiohttp's transport: plain
httpx's pool costs several times more per request at high concurrency (encode/httpcore#1035).
"""

from __future__ import annotations

import httpx
from httpx_aiohttp import AiohttpTransport

from gateway.config import DeploymentConfig


def make_client(deployment: DeploymentConfig, *,
                transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=deployment.max_connections,
                          max_keepalive_connections=deployment.max_connections, keepalive_expiry=30)
    if transport is None:
        transport = AiohttpTransport(limits=limits, trust_env=False)
    return httpx.AsyncClient(transport=transport, trust_env=False,
                             timeout=httpx.Timeout(deployment.timeout, connect=deployment.connect_timeout))
