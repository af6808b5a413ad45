"""A request's path, one arrow per step:

route (endpoint -> dialect) -> authenticate the key -> parse the dialect into the canonical
request -> admit it against every limit -> the router picks a deployment and runs it -> canonical
chunks flow back -> rendered in the caller's dialect -> usage is settled.

``Gateway.serve`` owns a request from its bytes to its settlement: once admitted, one ``finally``
settles the ticket whatever happens (an answer, an upstream failure, a client that left, a bug).
Handlers in ``switchyard.http.asgi`` only move bytes; the context
(``switchyard.gateway.context``) records what happened for logs and metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import msgspec

from switchyard.core.canonical import CanonicalRequest, Chunk, Usage, replace
from switchyard.core.config import Config
from switchyard.core.deployments import default_output_tokens
from switchyard.core.errors import Forbidden, GatewayError, InvalidRequest, Unauthorized, Unavailable
from switchyard.dialects.defaults import sampling_defaults
from switchyard.dialects.errors import error_bytes, error_json
from switchyard.dialects.parse import parse_request
from switchyard.dialects.registry import ANSWERS, DIALECT_HEADER, sniff_completion_dialect
from switchyard.dialects.render import Renderer
from switchyard.gateway.cache import HEADER as CACHE_HEADER
from switchyard.gateway.cache import Lane, lane_for
from switchyard.gateway.context import RequestContext
from switchyard.gateway.requests import (
    decode_body,
    model_name,
    unsent_warning,
)
from switchyard.gateway.streaming import Tally, gather
from switchyard.gateway.types import SSE, Endpoint, Responder, Tracer
from switchyard.guards.rules import Guardrails
from switchyard.guards.run import GUARDRAILS_HEADER, GuardRun
from switchyard.guards.webhook import Webhooks
from switchyard.policies.attribution import read_attribution
from switchyard.policies.base import Outcome, Principal
from switchyard.policies.factory import Policies
from switchyard.policies.pricing import COST_HEADER, usd_text
from switchyard.policies.refusals import reason_of
from switchyard.policies.tokens import count_prompt_tokens
from switchyard.routing import Route, Router
from switchyard.routing.window import truncates

log = logging.getLogger("switchyard")

# What a caller is told of a bug (its cause is logged under the request id, never sent).
INTERNAL = GatewayError("internal error; it has been logged with this request's id")


def _kept(e: GatewayError) -> GatewayError:
    """``e`` as the context keeps it: without its traceback, whose frames hold the context (a
    cycle that would leave each refused request's objects to the garbage collector). What the
    caller was told is all that is read of it; a bug's traceback is logged where it is caught."""
    e.__traceback__ = None
    return e


def bearer_key(headers: Mapping[str, str]) -> str | None:
    """The caller's key, from ``Authorization: Bearer`` or ``x-api-key``. Two different keys are
    refused (``InvalidRequest``): which one was charged would be the gateway's guess."""
    api_key = headers.get("x-api-key") or None
    auth = headers.get("authorization")
    if auth:
        scheme, _, token = auth.partition(" ")
        token = token.strip()
        if scheme.lower() == "bearer" and token:
            if api_key is not None and not hmac.compare_digest(api_key.encode(), token.encode()):
                raise InvalidRequest("the x-api-key and Authorization: Bearer headers carry different "
                                     "keys: send one of them (or the same key in both)", param="x-api-key")
            return token
    return api_key


class Gateway:
    def __init__(self, config: Config, router: Router, policies: Policies) -> None:
        self.config = config
        self.router = router
        self.policies = policies
        self.guardrails = Guardrails(config)  # resolved here, once: a request pays one check when off
        self.webhooks = Webhooks()  # webhook guards' one pool: no connection until one is asked
        # Called with every finished request's context (access log, metrics, tracing).
        self.observers: list[Callable[[RequestContext], None]] = []
        self.tracing: Tracer | None = None  # set when tracing.otlp_endpoint is configured
        self.inflight = 0  # requests between their first byte in and their settlement
        self._idle: asyncio.Event | None = None  # set when inflight drops to 0 (drain waits on it)

    async def embed(self, text: str) -> list[float] | None:
        """``text``'s vector from the built-in embedder, for semantic caching (docs/cache.md): the
        gateway's own call, not the caller's (not admitted or charged). None when it cannot."""
        name = self.config.semantic_embedder()
        if name is None:
            return None
        try:
            route = self.router.resolve(name)
            backend = route.targets[0].backend
            if not backend.ready:
                return None
            req = CanonicalRequest(kind="embedding", model=name, dialect="embeddings", prompt=[text])
            async for ch in backend.generate(req):
                if ch.embeddings:
                    return ch.embeddings[0]
        except Exception:  # no vector: the exact match stands
            log.warning("semantic cache: the embedder gave no vector", exc_info=True)
        return None

    def begin(self) -> None:
        self.inflight += 1

    async def drain(self) -> None:
        """Wait until every request in flight has finished and been settled (tests, shutdown)."""
        while self.inflight:
            if self._idle is None:
                self._idle = asyncio.Event()
            await self._idle.wait()

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        raw = bearer_key(headers)
        if raw is None:
            e = Unauthorized("missing API key: send Authorization: Bearer <key> or x-api-key")
            e.reason = "missing_key"
            raise e
        principal = await self.policies.keys.lookup(raw)
        if principal is None:
            e = Unauthorized("invalid API key")  # never echo the key
            e.reason = "expired_key" if await self.policies.keys.expired(raw) else "invalid_key"
            raise e
        return principal

    def finished(self, ctx: RequestContext) -> None:
        self.inflight -= 1
        if not self.inflight and self._idle is not None:
            self._idle.set()
            self._idle = None
        for observe in self.observers:
            try:
                observe(ctx)
            except Exception:  # an observer's bug must not fail the request
                log.exception("request observer failed")

    async def serve(self, ctx: RequestContext, ep: Endpoint, headers: Mapping[str, str], raw: bytes,
                    out: Responder) -> None:
        """Answer one request on ``out``; settle it if it was admitted."""
        try:
            req = await self._prepare(ctx, ep, headers, raw)
            if ep.counts:  # count_tokens: checked as a completion is, up to admission; not charged
                if ctx.guards is not None:
                    ctx.guards.close()
                ctx.status = 200
                await out.whole(200, {}, msgspec.json.encode({"input_tokens": ctx.run.prompt_tokens}))
                return
            req = await self._admit(ctx, req)
            # The response cache's rule: the key's or its team's (chosen when the key was read),
            # else the model's. Off, it costs this one check.
            p, route = ctx.principal, ctx.route
            assert p is not None and route is not None
            rule = p.cache or route.model.cache
            lane = None
            # An answer a guard reads (redacts, restores, or asks a webhook about) is not cached: a
            # restored answer holds one caller's own values.
            if rule is not None and rule.mode != "off" and (ctx.guards is None or not ctx.guards.answers()):
                lane = await lane_for(ctx, req, rule, self.policies.answers, headers,
                                      self.embed if rule.mode == "semantic" else None)
        except GatewayError as e:
            await self.send_error(ctx, out, e)
            await self._after_refusal(ctx, e)
            return
        except Exception as e:  # a bug: the caller's error shape and the request id, the cause logged
            log.exception("request %s failed before its upstream call", ctx.id)
            ctx.error_type = type(e).__name__
            await self.send_error(ctx, out, INTERNAL)
            await self._after_refusal(ctx, INTERNAL)
            return
        await self._run(ctx, req, out, lane)

    async def _after_refusal(self, ctx: RequestContext, e: GatewayError) -> None:
        """A request that failed before its upstream call: admitted, it gives its reservation back
        (the settlement records it); refused before admission, it is recorded as a refusal."""
        if ctx.guards is not None:
            ctx.guards.close()
        if ctx.ticket is not None:
            if not ctx.ticket.settled:
                if ctx.tally is None:
                    ctx.tally = Tally(ctx.run.prompt_tokens or 0)
                await self._settle(ctx)
            return
        self.refused(ctx, e)

    def refused(self, ctx: RequestContext, e: GatewayError) -> None:
        """A request refused before admission (here, or by the HTTP layer before its key was
        read): a record for a known key, a count per reason otherwise."""
        p = ctx.principal
        if p is None:
            self.policies.refusals.unauthenticated(reason_of(e))
            return
        # The model a record is aggregated under is a configured one (never what a caller
        # made up); what the caller named is kept as requested_model.
        model = ctx.route.group if ctx.route is not None else ""
        if not model and ctx.requested_model:
            with contextlib.suppress(GatewayError):
                model = self.router.resolve(ctx.requested_model).group
        self.policies.refusals.refused(
            p, model=model, status=ctx.status or e.status,
            reason=reason_of(e), latency_ms=ctx.latency * 1000, request_id=ctx.id, endpoint=ctx.endpoint,
            dialect=ctx.dialect, requested_model=ctx.requested_model,
            guardrails=ctx.guards.header() or "" if ctx.guards is not None else "")

    # -- steps before admission ------------------------------------------------------------

    async def _prepare(self, ctx: RequestContext, ep: Endpoint, headers: Mapping[str, str],
                       raw: bytes) -> CanonicalRequest:
        body, bad = decode_body(raw, headers)
        try:
            dialect = ep.dialect or sniff_completion_dialect(body, headers)
        except InvalidRequest:  # a header, not a body field: OpenAI's plain error shape
            ctx.shape = "chat"
            raise
        ctx.dialect = dialect.name
        ctx.shape = ep.renderer or dialect.name
        ctx.dialect_named = ep.dialect is None and DIALECT_HEADER in headers
        principal = ctx.principal = await self.authenticate(headers)
        if bad is not None:
            raise bad
        if isinstance(body, dict):
            self._default_model(body, principal, ep)
        if ep.read is not None:
            req = ep.read(body, headers, strict=principal.strict, count=ep.counts)
        else:
            req = parse_request(dialect, body, kind=ep.kind, strict=principal.strict)
        ctx.requested_model = model_name(req.model)
        ctx.attribution = read_attribution(headers, req.user, body, self.config.usage.tags)
        ctx.stream = req.stream
        route = ctx.route = self._route(req, principal)
        plan = self.guardrails.any and self.guardrails.plan(route.group, principal.team, principal.key_id)
        if plan:
            ctx.guards = GuardRun(plan, self.webhooks, {"model": route.group, "team": principal.team,
                                                        "key_id": principal.key_id, "request_id": ctx.id})
            req = await ctx.guards.request(req)
        timeout = req.timeout if req.timeout is not None else principal.timeout
        if timeout is not None:
            ctx.deadline = ctx.started + timeout
            if req.timeout is None:  # the router bounds each attempt by req.timeout
                req = replace(req, timeout=timeout)
        ctx.run.prompt_tokens = await self._count(req, route, principal.team, exact=ep.counts)
        return req

    async def _admit(self, ctx: RequestContext, req: CanonicalRequest) -> CanonicalRequest:
        """Admit ``req`` against every limit; the request to send (its max_tokens may be set)."""
        principal, route, prompt_tokens = ctx.principal, ctx.route, ctx.run.prompt_tokens
        assert principal is not None and route is not None and prompt_tokens is not None
        ctx.admit_at = time.monotonic()
        per_choice = self._reservation(req, route, prompt_tokens)
        ticket = ctx.ticket = await self.policies.policy.admit(
            principal, route.group, prompt_tokens=prompt_tokens, max_tokens=per_choice,
            choices=len(req.prompt or [None]) * max(req.best_of or 1, req.n or 1),
            fail_open=route.fail_open, group=route.model.name, upstream_model=route.upstream_model,
            attribution=ctx.attribution)
        ctx.admitted_at = time.monotonic()
        ctx.tally = Tally(prompt_tokens)
        ctx.warning = unsent_warning(req, route)
        # What was reserved is what the upstream may produce: a request without a bound (or one a
        # quota lowered) is sent with the admitted max_tokens.
        if ticket.max_tokens is not None and (ticket.lowered or req.max_tokens is None or req.max_tokens < 0):
            req = replace(req, max_tokens=ticket.max_tokens)
        return req

    def _default_model(self, body: dict[str, Any], principal: Principal, ep: Endpoint) -> None:
        """An unnamed model is the key's default, or the only one of the endpoint's kind (answered
        by its real name)."""
        if body.get("model") not in (None, "", "default"):
            return
        if principal.default_model:
            body["model"] = principal.default_model
        elif body.get("model") == "default" or (ep.model_optional and body.get("model") is None):
            body["model"] = self.router.default(ep.kind).group

    def _route(self, req: CanonicalRequest, principal: Principal) -> Route:
        route = self.router.resolve(req.model)
        # The allow-lists see the configured name the caller's resolved to: an alias neither
        # escapes them nor needs listing itself.
        if not principal.may_use(route.group):
            raise Forbidden(f"key {principal.key_id} may not use model {req.model}", param="model")
        return route

    async def _count(self, req: CanonicalRequest, route: Route, team: str, *, exact: bool = False) -> int:
        backend = route.targets[0].backend
        counted = await backend.count_tokens(req, exact=exact) if backend.ready else None
        return counted if counted is not None else count_prompt_tokens(req, route.model, scope=team)

    @staticmethod
    def _reservation(req: CanonicalRequest, route: Route, prompt_tokens: int) -> int:
        """Completion tokens per choice to hold against the limits until the real count is known
        (and, when the caller set no bound, the bound sent upstream)."""
        if req.kind == "embedding":
            return 0  # an embedding produces no tokens: only its input counts
        window = max(route.model.context_window - prompt_tokens, 1) if route.model.context_window else None
        max_tokens = req.max_tokens
        if max_tokens is None or max_tokens < 0:
            # a completions dialect's own default (OpenAI's 16), else the model's (max_output_tokens ...)
            default = sampling_defaults(req.dialect).get("max_tokens") if req.kind == "completion" else None
            if not (isinstance(default, int) and default > 0):
                default = default_output_tokens(route.model)
            max_tokens = default
        cap = route.model.max_output_tokens
        if cap is not None and truncates(req):  # what the router will lower it to
            max_tokens = min(max_tokens, cap)
        # A known window bounds it (a larger ask is truncated or refused).
        return min(max_tokens, window) if window is not None else max_tokens

    # -- after admission: one owner, one finally ---------------------------------------------

    async def _run(self, ctx: RequestContext, req: CanonicalRequest, out: Responder,
                   lane: Lane | None = None) -> None:
        assert ctx.ticket is not None and ctx.route is not None and ctx.tally is not None
        headers = dict(ctx.ticket.headers)
        if ctx.warning:
            headers["x-switchyard-warning"] = ctx.warning
        route = ctx.route
        if lane is None:
            headers[CACHE_HEADER] = "bypass"
            chunks = self.router.stream(req, route, ctx.run)
        else:
            ctx.cache = lane.state
            headers[CACHE_HEADER] = lane.state
            if lane.headers:
                headers.update(lane.headers)
            chunks = lane.chunks(lambda: self.router.stream(req, route, ctx.run), req.stream)
        if ctx.guards is not None and ctx.guards.answers():
            chunks = ctx.guards.answer(chunks, req.stream, lambda r: self.router.stream(r, route, ctx.run))
        out.watch()
        renderer = ANSWERS[ctx.shape](req, ctx.tally.prompt_tokens)
        try:
            if req.stream:
                await self._stream(ctx, renderer, chunks, headers, out)
                if lane is not None and ctx.status == 200 and not ctx.cut and await lane.keep(True):
                    ctx.cache = "stored"  # after the fact: the stream's header said miss
            else:
                await self._whole(ctx, renderer, chunks, headers, out, lane)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            if out.gone:
                ctx.status, ctx.cut = 499, out.started
            else:  # the server's shutdown_grace ran out: cut, say why, settle as cut, end cleanly
                await self.cut_by_shutdown(ctx, out, renderer if req.stream else None)
        except Exception as e:  # a bug: answer 500 when nothing was sent yet, and settle all the same
            log.exception("request %s failed", ctx.id)
            ctx.error_type = type(e).__name__
            if not out.started:
                await self.send_error(ctx, out, INTERNAL)
            else:
                ctx.status, ctx.cut = 500, True
                with contextlib.suppress(Exception):
                    await out.end(b"")
        finally:
            out.unwatch()
            await chunks.aclose()
            await self._settle(ctx)

    async def _whole(self, ctx: RequestContext, renderer: Renderer, chunks: AsyncGenerator[Chunk, None],
                     headers: dict[str, str], out: Responder, lane: Lane | None = None) -> None:
        tally = ctx.tally
        assert tally is not None
        got: list[Chunk] = []
        try:
            async for ch in chunks:
                tally.add(ch)
                got.append(ch)
        except GatewayError as e:
            headers.update(ctx.run.headers())  # which deployments were tried, how often
            _bill(tally, e)
            await self.send_error(ctx, out, e, headers)
            return
        headers.update(ctx.run.headers())
        usage = tally.usage()
        if lane is not None and lane.hit is None and await lane.keep(False, got):
            ctx.cache = headers[CACHE_HEADER] = "stored"
        headers[COST_HEADER] = cost_text(ctx, usage)
        _guarded(ctx, headers)
        body = msgspec.json.encode(renderer.completion(gather(got, usage)))
        ctx.status = 200
        await out.whole(200, headers, body)

    async def _stream(self, ctx: RequestContext, renderer: Renderer, chunks: AsyncGenerator[Chunk, None],
                      headers: dict[str, str], out: Responder) -> None:
        tally = ctx.tally
        assert tally is not None
        # Wait for the first chunk so that a failure before any byte gets a real status code.
        try:
            first = await anext(chunks, None)
        except GatewayError as e:
            headers.update(ctx.run.headers())
            _bill(tally, e)
            await self.send_error(ctx, out, e, headers)
            return
        headers.update(ctx.run.headers())
        _guarded(ctx, headers)
        headers["cache-control"] = "no-cache"
        ctx.status = 200
        await out.start(200, headers, SSE)
        last: Chunk | None = None
        ch = first
        held: list[bytes] = []  # events already rendered while more chunks are in hand
        try:
            while ch is not None:
                tally.add(ch)
                if (ch.text or ch.finish_reason or ch.logprobs or ch.role or ch.tool_calls or ch.thinking
                        or ch.reasoning):
                    last = ch if ch.finish_reason else last
                    held.append(renderer.event(ch))
                # Events that arrived together go out in one write, the first ones too: the rest
                # of an arrival is in hand (ch.more), and a write costs the server more than
                # rendering the rest does; the first byte waits only for that rendering.
                if held and not ch.more:
                    await out.body(held[0] if len(held) == 1 else b"".join(held))
                    held = []
                ch = await anext(chunks, None)
        except GatewayError as e:
            ctx.status, ctx.error_type, ctx.error, ctx.cut = e.status, e.type, _kept(e), True
            body = error_json(ctx.shape, e, ctx.dialect_named)[1]
            await out.end(b"".join(held) + renderer.error_event(body))
            return
        usage = tally.usage()
        held.append(renderer.closing(usage, last))
        # After the last event (and [DONE]): an SSE comment, which every client skips.
        held.append(b": " + COST_HEADER.encode() + b" " + cost_text(ctx, usage).encode() + b"\n\n")
        await out.end(b"".join(held))

    async def cut_by_shutdown(self, ctx: RequestContext, out: Responder,
                              renderer: Renderer | None = None) -> None:
        """A request the stopping server cancelled (``server.shutdown_grace`` ran out): answered 503
        if nothing was sent yet, else its stream ends with an error event; recorded as 503, cut."""
        e = Unavailable(f"the gateway is shutting down (server.shutdown_grace "
                        f"{self.config.server.shutdown_grace:g} s ran out)")
        cut = out.started
        with contextlib.suppress(Exception):  # the connection may be gone already
            if not cut:
                await self.send_error(ctx, out, e)
            elif renderer is not None and not out.finished:
                await out.end(renderer.error_event(error_json(ctx.shape, e, ctx.dialect_named)[1]))
        ctx.status, ctx.error_type, ctx.error, ctx.cut = e.status, "shutdown", e, cut

    async def send_error(self, ctx: RequestContext, out: Responder, e: GatewayError,
                         headers: dict[str, str] | None = None) -> None:
        status, body = error_bytes(ctx.shape, e, ctx.dialect_named)
        ctx.status, ctx.error_type, ctx.error = status, e.type, _kept(e)
        headers = {**(headers or {}), **e.headers}
        _guarded(ctx, headers)
        await out.whole(status, headers, body)

    async def _settle(self, ctx: RequestContext) -> None:
        ticket, tally, run = ctx.ticket, ctx.tally, ctx.run
        assert ticket is not None and tally is not None
        ttfb = ctx.ttfb
        ctx.settle_at = time.monotonic()
        usage = _charged(tally, ctx.status)
        hit = ctx.cache == "hit"  # no upstream call: nothing charged, the original's usage saved
        # By position (usage, status, called, deployment ... cache_hit, saved): 0.5 us against 1.3
        # by keyword. tests/gateway/test_records.py checks each field lands in place.
        outcome = Outcome(Usage() if hit else usage, ctx.status or 499, hit or run.attempts > 0,
                          run.deployment or "", ctx.latency * 1000, -1.0 if ttfb is None else ttfb * 1000,
                          run.attempts, ctx.cut, ctx.id, ctx.endpoint, ctx.dialect, ctx.requested_model,
                          _reason(ctx), ctx.guards.header() or "" if ctx.guards is not None else "", hit,
                          usage if hit else None)
        ctx.usage = outcome.usage
        await self.policies.policy.settle(ticket, outcome)
        ctx.settled_at = time.monotonic()


def cost_text(ctx: RequestContext, usage: Usage) -> str:
    """What ``usage`` costs at the price of the deployment that served it, in USD (as
    ``x-switchyard-cost`` says it), or ``unpriced``."""
    if ctx.cache == "hit":
        return usd_text(0)  # nothing was called: the usage replayed is the original answer's
    prices = ctx.ticket.prices if ctx.ticket is not None else None
    nano = prices.cost(ctx.run.deployment or "", usage) if prices is not None else 0
    return "unpriced" if nano is None else usd_text(nano)


def _reason(ctx: RequestContext) -> str:
    if ctx.error is not None:
        return reason_of(ctx.error)
    return {499: "client_closed", 500: "internal_error"}.get(ctx.status or 499, "")


def _guarded(ctx: RequestContext, headers: dict[str, str]) -> None:
    """Names the guards that acted on the request (before its answer started)."""
    if ctx.guards is not None and (acted := ctx.guards.header()):
        headers[GUARDRAILS_HEADER] = acted


def _bill(tally: Tally, e: GatewayError) -> None:
    """An upstream that failed after reporting usage (a JSON answer to a stream) is billed it."""
    if e.billed is not None:
        tally.reported = e.billed


def _charged(tally: Tally, status: int) -> Usage:
    """What the backend reported it billed; else what was counted, for an answer that was given or
    produced tokens; nothing for a request that failed before any token."""
    if tally.reported is not None or tally.produced or status == 200:
        return tally.usage()
    return Usage()


__all__ = ["Gateway", "bearer_key"]
