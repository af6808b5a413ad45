"""Upstream providers over HTTP, each speaking its own dialect."""

from switchyard.providers.provider import UpstreamBackend

__all__ = ["UpstreamBackend"]
