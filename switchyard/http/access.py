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


class Line(msgspec.Struct, omit_defaults=True):
    """An access line: a field at its default is left out (absent rather than null). A Struct,
    not a dict: built by position, without hashing a key per field, and its keys encoded from C."""

    ts: str
    event: str  # (no default: ``omit_defaults`` would leave it out)
    request_id: str
    endpoint: str
    status: int
    latency_ms: float
    method: str | None = None  # the admin API's, console's and /v1/models' lines
    dialect: str = ""
    key_id: str | None = None
    team: str | None = None
    model: str | None = None
    group: str | None = None
    requested_model: str | None = None
    deployment: str | None = None
    attempts: int | None = None
    upstream_request_id: str | None = None
    fallback: str | None = None
    stream: bool = False
    cut: bool = False
    cache: str = ""  # under a response-cache rule: hit, miss, stored or bypass
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0
    spend_usd: float | None = None
    unpriced: bool = False
    ttfb_ms: float | None = None
    upstream_ms: float | None = None
    trace_id: str | None = None


def record(ctx: RequestContext) -> Line:
    """The access line's fields (by position: ``Line``'s order)."""
    p, route, run = ctx.principal, ctx.route, ctx.run
    dep = run.deployment
    billed = ctx.usage if route is not None else None  # what was charged, once a model was named
    own = run.upstream_id if dep is not None and run.upstream_id != ctx.id else None
    ttfb, upstream = ctx.ttfb, ctx.upstream
    prompt: int | None = None
    completion: int | None = None
    spend: float | None = None
    cached, unpriced = 0, False
    if billed is not None:
        prompt, completion, cached = billed.prompt_tokens, billed.completion_tokens, billed.cached_tokens
        spend, unpriced = round(ctx.spend_usd, 9), ctx.unpriced
    return Line(
        iso(time.time()), "request", ctx.id, ctx.endpoint, ctx.status or 499, _ms(ctx.latency), None,
        ctx.dialect, p.key_id if p is not None else None, p.team if p is not None else None,
        ctx.known_model, route.model.name if route is not None else None,
        unknown_model_shown(ctx.requested_model)  # requested_model: a 404's, unless it looks like a key
        if route is None and ctx.status == 404 and ctx.requested_model else None,
        dep, run.attempts if dep is not None else None,
        own or None,  # upstream_request_id: only when the caller named its own id
        run.fallback, ctx.stream, ctx.cut, ctx.cache, ctx.error_type,
        prompt, completion, cached, spend, unpriced,
        _ms(ttfb) if ttfb is not None else None, _ms(upstream) if upstream is not None else None,
        ctx.trace_id)


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
        self._add(Line(iso(time.time()), "request", request_id, route, status or 499, _ms(seconds), method))

    def _add(self, r: Line) -> None:
        line = console_line(msgspec.to_builtins(r)).encode() if self.console else _encode(r)
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
