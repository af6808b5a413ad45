"""Upstream providers over HTTP, each speaking its own dialect."""

from backends.upstream.provider import UpstreamBackend

__all__ = ["UpstreamBackend"]
