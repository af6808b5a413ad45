"""One timer for a connection's deadlines, which move request after request.

Arming and cancelling a uvloop timer for each deadline costs 3.3 us. Here a new deadline later
than the armed timer is only stored; when the timer fires early, it re-arms for the deadline now
due. The server's connections and the upstream pool's use it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable


class Deadline:
    __slots__ = ("_expired", "_loop", "_timer", "due")

    def __init__(self, loop: asyncio.AbstractEventLoop, expired: Callable[[], None]) -> None:
        self._loop = loop
        self._expired = expired  # called once ``due`` has passed
        self._timer: asyncio.TimerHandle | None = None
        self.due = math.inf  # loop time; inf: none

    def set(self, due: float) -> None:
        self.due = due
        timer = self._timer
        if timer is None or timer.when() > due:
            if timer is not None:
                timer.cancel()
            self._timer = self._loop.call_at(due, self._tick)

    def clear(self) -> None:
        """No deadline for now; the timer stays armed for the next one."""
        self.due = math.inf

    def cancel(self) -> None:
        """No deadline ever again (the connection is closed): the timer goes too, and the
        callback (no cycle back to its owner left for the collector)."""
        self.due = math.inf
        self._expired = _nothing
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        self._timer = None
        if self.due == math.inf:
            return
        if self.due > self._loop.time():  # a later deadline than the one armed: wait for it
            self._timer = self._loop.call_at(self.due, self._tick)
            return
        self._expired()


def _nothing() -> None:
    pass
