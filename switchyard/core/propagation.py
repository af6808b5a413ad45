"""Headers the gateway adds to every upstream call it makes for a request: ``x-request-id``
always, and W3C ``traceparent`` (of the attempt's span) while tracing. Set at the edge and per
attempt in the request's own task; read by the upstream backend when it sends. (Callers can never
set these through passthrough: ``switchyard.dialects.passthrough`` refuses them.)"""

from __future__ import annotations

from contextvars import ContextVar

OUTGOING: ContextVar[dict[str, str] | None] = ContextVar("switchyard_outgoing", default=None)
