"""The ASGI type aliases (as ``starlette.types``): a leaf every edge module may import."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# What the gateway's own server (``http.protocol``) offers in a scope's extensions beside ASGI:
# a whole answer in one call, ``answer(status, header_lines, body)``. ``header_lines`` are CRLF-ended
# lines its caller built and checked, without content-length or connection (the server adds them).
# It saves the two messages of a start and a body, and the server reading the head a second time.
ANSWER = "switchyard.answer"
Answer = Callable[[int, bytes, bytes], Awaitable[None]]
