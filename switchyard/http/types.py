"""The ASGI type aliases (as ``starlette.types``): a leaf every edge module may import."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# What the gateway's own server (``http.protocol``) offers in a scope's extensions beside ASGI.
ANSWER = "switchyard.answer"


class Answering(Protocol):
    """An answer written without ASGI's messages (``ANSWER``), for the hot endpoints: no message
    dict a part, and the head's lines read once, by their writer. ``lines`` are CRLF-ended header
    lines its caller built and checked, without content-length, transfer-encoding or connection:
    the server adds what the framing needs."""

    async def whole(self, status: int, lines: bytes, body: bytes) -> None:
        """The whole answer, with its content-length."""

    async def begin(self, status: int, lines: bytes) -> None:
        """A streamed (chunked) answer's head: it goes with the first part."""

    async def part(self, data: bytes, more: bool) -> None:
        """A part of the streamed answer; the last one has ``more`` false."""
