"""Kept for importers: the router lives in ``gateway.routing``."""

from gateway.routing import Route, Router, RunInfo, Target, build_backend

__all__ = ["Route", "Router", "RunInfo", "Target", "build_backend"]
