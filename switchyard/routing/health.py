"""Per-deployment health: a circuit breaker, the requests in flight, and a latency estimate.

The breaker is closed (traffic flows) until ``threshold`` consecutive failures open it for
``cooldown`` seconds. After the cooldown it is half-open: exactly one request probes; success
closes it, failure reopens it for another cooldown. An upstream's Retry-After holds it open for
that long even before the threshold (the upstream told us when to come back), up to
``router.retry_after_max``; an operator can close it at any time (``/admin/deployments``).

An open breaker only sheds load to healthy siblings: the router keeps sending a group's traffic to
its deployments when none of them is healthy (see ``Router._pick``), so no run of failures, nor
one caller's requests that make an upstream fail, can take a model away from everyone.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Final

CLOSED: Final = 0
OPEN: Final = 1
HALF_OPEN: Final = 2

# Weight of the newest time-to-first-chunk sample in the moving average.
EWMA_ALPHA: Final = 0.3


class Breaker:
    __slots__ = ("cooldown", "failures", "probing", "state", "threshold", "trips", "until")

    def __init__(self, threshold: int, cooldown: float) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self.failures = 0
        self.state = CLOSED
        self.until = 0.0  # OPEN: no traffic before this instant
        self.probing = False  # HALF_OPEN: the one probe is out
        self.trips = 0  # times it opened (a counter for /metrics)

    def allows(self, now: float) -> bool:
        """May a request be sent now? (No side effects; see ``acquire``.)"""
        if self.state == CLOSED:
            return True
        if self.state == OPEN:
            return now >= self.until
        return not self.probing

    def acquire(self, now: float) -> None:
        """A request was sent: past the cooldown it becomes the half-open probe."""
        if self.state == OPEN and now >= self.until:
            self.state = HALF_OPEN
        if self.state == HALF_OPEN:
            self.probing = True

    def success(self) -> None:
        self.failures = 0
        self.state = CLOSED
        self.probing = False

    def failure(self, now: float, hold: float | None = None, count: bool = True) -> None:
        """A request failed for the deployment's sake; ``hold``: its Retry-After, seconds.
        ``count=False``: the same request failed here before and was counted then (one request
        counts once, however often it is retried)."""
        if count:
            self.failures += 1
        if self.state == HALF_OPEN or self.failures >= self.threshold:
            self._open(now + self.cooldown)
        if hold is not None and hold > 0:
            self._open(max(now + hold, self.until if self.state == OPEN else 0.0))
        self.probing = False

    def release(self) -> None:
        """The probe ended without a verdict (the caller left, or the fault was the caller's):
        let the next request probe."""
        self.probing = False

    def reset(self) -> None:
        """An operator closed it (``POST /admin/deployments/reset``): traffic flows at once."""
        self.failures = 0
        self.state = CLOSED
        self.until = 0.0
        self.probing = False

    def retry_in(self, now: float) -> float:
        """Seconds until a request may be sent again (0 when one may be sent now)."""
        if self.state == OPEN:
            return max(0.0, self.until - now)
        return 0.0

    def _open(self, until: float) -> None:
        if self.state != OPEN:
            self.trips += 1
        self.state = OPEN
        self.until = until


class Health:
    """What the router knows about one deployment. One per deployment, shared by every request."""

    __slots__ = ("breaker", "errors", "ewma", "inflight", "ttfb")

    def __init__(self, threshold: int, cooldown: float) -> None:
        self.breaker = Breaker(threshold, cooldown)
        self.inflight = 0
        self.ewma: float | None = None  # seconds to the first chunk or a failure; None until measured
        self.ttfb: float | None = None  # the same over answers only: None until one came
        # The last few failures blamed on the deployment: (wall-clock epoch s, status, message).
        self.errors: deque[tuple[float, int, str]] = deque(maxlen=5)

    def note_error(self, status: int, message: str) -> None:
        self.errors.append((time.time(), status, message[:300]))

    def observe(self, seconds: float, answered: bool = True) -> None:
        e = self.ewma
        self.ewma = seconds if e is None else e + EWMA_ALPHA * (seconds - e)
        if answered:
            t = self.ttfb
            self.ttfb = seconds if t is None else t + EWMA_ALPHA * (seconds - t)
