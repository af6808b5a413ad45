"""Routing: model names to deployments, load balancing, retries, cooldowns, fallbacks, fan-out."""

from switchyard.routing.resolve import Route, RunInfo, Target, build_backend
from switchyard.routing.router import Router

__all__ = ["Route", "Router", "RunInfo", "Target", "build_backend"]
