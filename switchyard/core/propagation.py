"""Headers the gateway adds to every upstream call it makes for a request: ``x-request-id``
always (the gateway's own id, never the caller's: tenants share upstreams, and one could reuse
another's; unique per attempt), and W3C ``traceparent`` (of the attempt's span) while tracing.
Set per attempt in the request's own task (``Router._try``, the trace's spans); read by the
upstream backend when it sends. (Callers can never set these through passthrough:
``switchyard.dialects.passthrough`` refuses them.)"""

from __future__ import annotations

from contextvars import ContextVar

REQUEST_ID = "x-request-id"
OUTGOING: ContextVar[dict[str, str] | None] = ContextVar("switchyard_outgoing", default=None)
