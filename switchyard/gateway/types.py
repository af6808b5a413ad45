"""The gateway's interfaces with the edge (``switchyard.http``), a leaf of this package: what an
endpoint is, how a dialect reads a request its table cannot, where an answer goes
(``Responder``) and a request's trace (``Tracer``); the http package implements the last two.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from switchyard.core.canonical import CanonicalRequest, RequestKind
from switchyard.dialects.spec import Dialect
from switchyard.gateway.context import RequestContext

JSON = "application/json"
SSE = "text/event-stream"


class Reader(Protocol):
    """A dialect whose request needs more than its table (several fields at once, the headers):
    reads the decoded body (kept whole for a deployment that speaks the dialect)."""

    def __call__(self, body: Any, headers: Mapping[str, str], *, strict: bool = False,
                 count: bool = False) -> CanonicalRequest: ...


@dataclass(frozen=True, slots=True)
class Endpoint:
    kind: RequestKind
    dialect: Dialect | None  # None: told by the body (``/v1/completions`` serves several)
    renderer: str | None = None  # default: the dialect's name
    model_optional: bool = False  # llama.cpp's native endpoint serves its one model unnamed
    read: Reader | None = None  # default: the dialect's table (``parse_request``)
    counts: bool = False  # answers the prompt's token count ({"input_tokens": N}), generates nothing


class Tracer(Protocol):
    """A request's trace (``switchyard.http.tracing`` implements it over OpenTelemetry)."""

    def begin(self, ctx: RequestContext, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """Open the request's span, continuing the caller's trace if its headers carry one."""

    def end(self, ctx: RequestContext) -> None:
        """Close it when the request has ended (a ``Gateway`` observer)."""

    def shutdown(self) -> None:
        """Flush what is buffered (the app's shutdown)."""


class Responder(Protocol):
    """Where an answer goes (``switchyard.http.asgi`` implements it over ASGI)."""

    @property
    def started(self) -> bool: ...

    @property
    def gone(self) -> bool:
        """The client disconnected before the answer was complete."""
        ...

    @property
    def finished(self) -> bool:
        """The answer's last byte was handed to the server."""
        ...

    async def whole(self, status: int, headers: dict[str, str], body: bytes,
                    media_type: str = JSON) -> None: ...

    async def start(self, status: int, headers: dict[str, str], media_type: str) -> None: ...

    async def body(self, data: bytes) -> None: ...

    async def end(self, data: bytes) -> None: ...

    def watch(self) -> None:
        """Cancel the task serving the request if the client disconnects before the answer is
        complete."""
        ...

    def unwatch(self) -> None: ...
