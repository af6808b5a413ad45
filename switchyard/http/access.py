"""The access log: one line per request at its end (streams included, cut or not), on stderr.

Lines are encoded with msgspec (a few microseconds) and written in batches: the first line of a
batch arms a short timer (``FLUSH_AFTER``) and a full batch goes at once, so a busy gateway makes
one write per batch instead of one per request.

What a line holds is the request context's record, never a secret and never what a caller typed
that the gateway did not recognise: the key's id (not the key), and the model the caller named
only when it is a configured name (a typo may be a pasted key). The one exception is a 404's
``requested_model``, the name no route knows (so an operator sees which name a client such as
Claude Code asks for): cut to 64 characters of a safe set, and left out when it looks like a key.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import msgspec

from switchyard.core.logs import iso
from switchyard.gateway.context import RequestContext
from switchyard.gateway.requests import unknown_model_shown

FLUSH_AFTER = 0.05  # seconds a line may wait for others
BATCH = 256  # lines written together at most

_encode = msgspec.json.Encoder().encode


def _ms(seconds: float) -> float:
    """Milliseconds to the microsecond (cheaper than ``round``)."""
    return int(seconds * 1e6) / 1000


def record(ctx: RequestContext) -> dict[str, Any]:
    """The access line's fields (absent rather than null when unknown)."""
    now = time.time()
    out: dict[str, Any] = {"ts": iso(now), "event": "request", "request_id": ctx.id,
                           "endpoint": ctx.endpoint, "status": ctx.status or 499,
                           "latency_ms": _ms(ctx.latency)}
    if ctx.dialect:
        out["dialect"] = ctx.dialect
    p = ctx.principal
    if p is not None:
        out["key_id"] = p.key_id
        out["team"] = p.team
    route, run = ctx.route, ctx.run
    if route is not None:
        model = ctx.known_model
        if model is not None:
            out["model"] = model
        out["group"] = route.model.name
    elif ctx.status == 404 and ctx.requested_model:
        shown = unknown_model_shown(ctx.requested_model)
        if shown is not None:
            out["requested_model"] = shown
    if run.deployment is not None:
        out["deployment"] = run.deployment
        out["attempts"] = run.attempts
        if run.upstream_id and run.upstream_id != ctx.id:  # the caller named its own id
            out["upstream_request_id"] = run.upstream_id
    if run.fallback is not None:
        out["fallback"] = run.fallback
    if ctx.stream:
        out["stream"] = True
    if ctx.cut:
        out["cut"] = True
    if ctx.cache:  # under a response-cache rule: hit, miss, stored or bypass
        out["cache"] = ctx.cache
    if ctx.error_type is not None:
        out["error"] = ctx.error_type
    usage = ctx.usage
    if usage is not None and route is not None:
        out["prompt_tokens"] = usage.prompt_tokens
        out["completion_tokens"] = usage.completion_tokens
        if usage.cached_tokens:
            out["cached_tokens"] = usage.cached_tokens
        out["spend_usd"] = round(ctx.spend_usd, 9)
        if ctx.unpriced:
            out["unpriced"] = True
    ttfb = ctx.ttfb
    if ttfb is not None:
        out["ttfb_ms"] = _ms(ttfb)
    upstream = ctx.upstream
    if upstream is not None:
        out["upstream_ms"] = _ms(upstream)
    if ctx.trace_id is not None:
        out["trace_id"] = ctx.trace_id
    return out


_IN_HEAD = frozenset({"ts", "event", "status", "endpoint", "model", "latency_ms"})


def console_line(r: dict[str, Any]) -> str:
    """A line for a terminal: time, status, endpoint, model, latency, then the rest."""
    head = (f"{r['ts'][11:23]} {r['status']} {r['endpoint']} {r.get('model') or r.get('group') or '-'}"
            f" {r['latency_ms']:.1f}ms")
    return head + "".join(f" {k}={v}" for k, v in r.items() if k not in _IN_HEAD)


class AccessLog:
    def __init__(self, fmt: str = "json") -> None:
        self.console = fmt == "console"
        self._lines: list[bytes] = []
        self._timer: asyncio.TimerHandle | None = None

    def observe(self, ctx: RequestContext) -> None:
        self._add(record(ctx))

    def observe_other(self, request_id: str, method: str, route: str, status: int, seconds: float) -> None:
        """A line for the admin API, the console and /v1/models: the route's template (never the
        path itself, which may hold what a caller typed), its status and latency."""
        self._add({"ts": iso(time.time()), "event": "request", "request_id": request_id,
                   "endpoint": route, "method": method, "status": status or 499,
                   "latency_ms": _ms(seconds)})

    def _add(self, r: dict[str, Any]) -> None:
        line = console_line(r).encode() if self.console else _encode(r)
        self._lines.append(line)
        if len(self._lines) >= BATCH:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_AFTER, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._lines:
            return
        data = b"\n".join(self._lines) + b"\n"
        self._lines = []
        out = sys.stderr  # looked up each time: whoever captures stderr gets the lines
        try:
            out.flush()  # what ``logging`` wrote before stays before
            out.buffer.write(data)
        except AttributeError:  # a text-only stream
            out.write(data.decode())
        out.flush()
