"""What every layer needs to log: the request id of the task being served, UTC timestamps, and a
throttle for warnings that an outage would otherwise print once per request. Formatting and
configuration live at the edge (``switchyard.http.logs``)."""

from __future__ import annotations

import logging
import time
from contextvars import ContextVar
from typing import Any

# The request being served in this task, for every line logged on its behalf.
REQUEST: ContextVar[str | None] = ContextVar("switchyard_request", default=None)

_second: list[Any] = [-1, ""]  # the last second formatted: strftime costs a microsecond
_MILLIS = tuple(f".{ms:03d}Z" for ms in range(1000))  # a lookup, where formatting took 0.3 us


def iso(ts: float) -> str:
    """UTC, millisecond precision: 2026-11-24T19:06:06.123Z."""
    sec = int(ts)
    if sec != _second[0]:
        _second[:] = [sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))]
    return _second[1] + _MILLIS[int((ts - sec) * 1000)]


class Throttled:
    """At most one line per ``every`` seconds for each key (a deployment), saying how
    many were held back since: an outage must not print a line per request."""

    def __init__(self, logger: logging.Logger, every: float) -> None:
        self.logger = logger
        self.every = every
        self._next: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warning(self, key: str, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now < self._next.get(key, 0.0):
            self._held[key] = self._held.get(key, 0) + 1
            return
        held = self._held.pop(key, 0)
        if len(self._next) > 10_000:  # keys are configured names; this only bounds a bug
            self._next.clear()
        self._next[key] = now + self.every
        if held:
            msg += f" ({held} more like it in the last {self.every:g} s)"
        self.logger.warning(msg, *args)
