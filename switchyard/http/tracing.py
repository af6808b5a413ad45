"""OpenTelemetry traces over OTLP/HTTP (the ``otel`` extra; imported only when
``tracing.otlp_endpoint`` is set, so a plain install never loads it).

One SERVER span per request on a completion endpoint, its parent the caller's W3C
``traceparent`` when it sent one; children: ``admit`` (the limits), one CLIENT span per upstream
attempt (its ``traceparent`` goes to the upstream), and ``settle``. Attributes follow the GenAI
semantic conventions (``gen_ai.request.model``, ``gen_ai.usage.input_tokens``, ...) plus the
gateway's own (``switchyard.*``); never a key, and the requested model only when it is a
configured name. Admission and settlement are timed on the request context and become spans
when the request ends; attempts are live spans, since the upstream must see their ids.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from switchyard.core.errors import GatewayError
from switchyard.core.propagation import OUTGOING
from switchyard.core.settings import TracingConfig
from switchyard.gateway.context import RequestContext

# time.monotonic() -> Unix time: spans carry wall-clock nanoseconds.
_WALL = time.time() - time.monotonic()


def _ns(mono: float) -> int:
    return int((mono + _WALL) * 1e9)


def _operation(ctx: RequestContext) -> str:
    return "chat" if "chat" in ctx.endpoint else "text_completion"


class Tracing:
    def __init__(self, cfg: TracingConfig, version: str) -> None:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace = trace
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": cfg.service_name, "service.version": version}),
            sampler=ParentBased(TraceIdRatioBased(cfg.sample_ratio)))
        assert cfg.otlp_endpoint is not None
        self.provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=cfg.otlp_endpoint), schedule_delay_millis=500))
        self.tracer = self.provider.get_tracer("switchyard", version)
        self.propagator = TraceContextTextMapPropagator()

    def begin(self, ctx: RequestContext, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """The request's span, a child of the caller's ``traceparent`` when it sent a valid one."""
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers
                   if k in (b"traceparent", b"tracestate")}
        parent = self.propagator.extract(carrier) if carrier else None
        span = self.tracer.start_span(f"POST {ctx.endpoint}", context=parent,
                                      kind=self._trace.SpanKind.SERVER, start_time=_ns(ctx.started))
        ctx.span = span
        ctx.trace_id = format(span.get_span_context().trace_id, "032x")
        ctx.run.spans = Attempts(self, ctx, span)

    def end(self, ctx: RequestContext) -> None:
        """At the request's end (a ``Gateway`` observer): attributes, the admit and settle spans."""
        span: Any = ctx.span
        if span is None:
            return
        ctx.span = None
        if span.is_recording():
            span.set_attributes(attributes(ctx))
            parent = self._trace.set_span_in_context(span)
            if ctx.admit_at is not None:
                self._child("admit", parent, ctx.admit_at, ctx.admitted_at,
                            None if ctx.ticket is not None else ctx.error_type)
            if ctx.settle_at is not None:
                self._child("settle", parent, ctx.settle_at, ctx.settled_at, None)
            if ctx.status >= 500 or ctx.status == 0:
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
        span.end()

    def _child(self, name: str, parent: Any, start: float, end: float | None, error: str | None) -> None:
        child = self.tracer.start_span(name, context=parent, start_time=_ns(start))
        if error is not None:
            child.set_attribute("error.type", error)
            child.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
        child.end(end_time=_ns(end if end is not None else time.monotonic()))

    def shutdown(self) -> None:
        self.provider.shutdown()  # sends what is still batched


class Attempts:
    """``switchyard.routing.resolve.AttemptSpans`` for one request: a CLIENT span per upstream
    attempt, whose context is what the upstream call carries as ``traceparent``."""

    __slots__ = ("ctx", "current", "parent", "tracing")

    def __init__(self, tracing: Tracing, ctx: RequestContext, span: Any) -> None:
        self.tracing = tracing
        self.ctx = ctx
        self.parent = tracing._trace.set_span_in_context(span)
        self.current: Any = None

    def start(self, deployment: str) -> None:
        t = self.tracing
        self.end()
        op = _operation(self.ctx)
        span = t.tracer.start_span(f"{op} {deployment}", context=self.parent,
                                   kind=t._trace.SpanKind.CLIENT,
                                   attributes={"gen_ai.operation.name": op,
                                               "switchyard.deployment": deployment,
                                               "switchyard.attempt": self.ctx.run.attempts})
        self.current = span
        headers: dict[str, str] = {}  # (the router adds the attempt's x-request-id)
        t.propagator.inject(headers, context=t._trace.set_span_in_context(span))
        OUTGOING.set(headers)

    def end(self, error: BaseException | None = None) -> None:
        span, self.current = self.current, None
        if span is None:
            return
        if error is not None:
            span.set_attribute("error.type", error.type if isinstance(error, GatewayError)
                               else type(error).__name__)
            span.set_status(self.tracing._trace.Status(self.tracing._trace.StatusCode.ERROR))
        span.end()


def attributes(ctx: RequestContext) -> dict[str, Any]:
    out: dict[str, Any] = {"http.request.method": "POST", "url.path": ctx.endpoint,
                           "http.response.status_code": ctx.status or 499,
                           "gen_ai.operation.name": _operation(ctx), "switchyard.request_id": ctx.id}
    if ctx.dialect:
        out["switchyard.dialect"] = ctx.dialect
    p, route, run = ctx.principal, ctx.route, ctx.run
    if p is not None:
        out["switchyard.key_id"] = p.key_id
        out["switchyard.team"] = p.team
    if route is not None:
        out["gen_ai.request.model"] = ctx.known_model or route.model.name
        out["gen_ai.response.model"] = run.fallback or route.model.name
        out["switchyard.group"] = route.model.name
    if run.deployment is not None:
        out["switchyard.deployment"] = run.deployment
        out["switchyard.attempts"] = run.attempts
    if ctx.stream:
        out["gen_ai.request.stream"] = True
    if ctx.cut:
        out["switchyard.cut"] = True
    if ctx.error_type is not None:
        out["error.type"] = ctx.error_type
    if ctx.usage is not None:
        out["gen_ai.usage.input_tokens"] = ctx.usage.prompt_tokens
        out["gen_ai.usage.output_tokens"] = ctx.usage.completion_tokens
    ttfb = ctx.ttfb
    if ttfb is not None:
        out["switchyard.ttfb_ms"] = round(ttfb * 1000, 3)
    return out
