"""Routing: model names to deployments, load balancing, retries, cooldowns, fallbacks, fan-out."""

from gateway.routing.resolve import Route, RunInfo, Target, build_backend
from gateway.routing.router import Router

__all__ = ["Route", "Router", "RunInfo", "Target", "build_backend"]
