"""How a request hears that its client hung up: the server (``switchyard.http.protocol``) puts a
``Disconnect`` in the scope's extensions under ``DISCONNECT``; the ASGI handlers
(``switchyard.http.asgi``) set its callback. A leaf, so neither imports the other."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

DISCONNECT = "switchyard.disconnect"


class Disconnect:
    """Calls its callback when the connection is lost: how a request learns that its client left
    without a task of its own blocked in ``receive()`` (which costs tens of microseconds a
    request)."""

    __slots__ = ("callback", "done", "task")

    def __init__(self) -> None:
        self.callback: Callable[[], None] | None = None
        self.done = False  # the request no longer listens
        self.task: asyncio.Task[None] | None = None  # the one serving the request, once started

    def fire(self) -> None:
        cb, self.callback = self.callback, None
        if cb is not None and not self.done:
            cb()
