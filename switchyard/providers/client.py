"""One connection pool per deployment, behind httpx's transport interface.

The default is ``H1Transport`` (see h1.py for why); tests may pass any httpx transport (respx's
mock, httpx's own) and the backend drives it the same way.
"""

from __future__ import annotations

import httpx

from switchyard.core.deployments import DeploymentConfig
from switchyard.providers.h1 import H1Transport


def make_transport(deployment: DeploymentConfig) -> httpx.AsyncBaseTransport:
    return H1Transport(max_connections=deployment.max_connections,
                       connect_timeout=deployment.connect_timeout)
