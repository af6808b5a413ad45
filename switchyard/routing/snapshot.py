"""What the router knows about each deployment, as plain data (``GET /admin/deployments``).

Read from the public health state (``switchyard.routing.health``); nothing here changes it.
"""

from __future__ import annotations

import time
from typing import Any

from switchyard.core.logs import iso
from switchyard.routing.health import CLOSED, HALF_OPEN, OPEN
from switchyard.routing.resolve import Target

CIRCUIT = {CLOSED: "closed", OPEN: "open", HALF_OPEN: "half_open"}


def target_snapshot(t: Target, now: float) -> dict[str, Any]:
    """``now``: the router's clock (``Router.clock``), which the breaker's instants are on."""
    h = t.health
    b = h.breaker
    cooldown = b.retry_in(now)
    return {
        "name": t.name, "model": t.model.name, "deployment": t.deployment.name,
        "backend": t.deployment.backend, "ready": t.backend.ready,
        "healthy": t.backend.ready and b.allows(now),  # would take traffic now
        "circuit": CIRCUIT[b.state], "consecutive_failures": b.failures,
        "cooldown_s": round(cooldown, 3), "inflight": h.inflight,
        # wall-clock instant the cooldown ends (an upstream's Retry-After included), while it runs
        "cooldown_until": iso(time.time() + cooldown) if cooldown > 0 else None,
        # Time to the first chunk of answers: a deployment that never answered has none (null),
        # however long its failures took.
        "latency_ms": round(h.ttfb * 1000, 1) if h.ttfb is not None else None,
        "recent_errors": [{"at": iso(at), "status": status, "message": msg}
                          for at, status, msg in reversed(h.errors)],
    }


def snapshot(targets: list[Target], now: float) -> list[dict[str, Any]]:
    return [target_snapshot(t, now) for t in targets]
