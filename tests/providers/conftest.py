"""The gateway fixtures (a real gateway on loopback in front of real fake upstreams)."""

from tests.gateway.conftest import gateway_for, upstream

__all__ = ["gateway_for", "upstream"]
