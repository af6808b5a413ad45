"""A request's path, one arrow per step:

route (endpoint -> dialect) -> authenticate the key -> parse the dialect into the canonical
request -> admit it against every limit -> the router picks a deployment and runs it -> canonical
chunks flow back -> usage is settled -> the response is rendered in the caller's dialect.

Handlers in ``gateway.app`` only move bytes in and out of ``Gateway.handle``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import msgspec

from gateway.canonical import CanonicalRequest, Chunk, RequestKind
from gateway.config import Config
from gateway.dialects.defaults import sampling_defaults
from gateway.dialects.errors import error_bytes, error_json
from gateway.dialects.parse import parse_request
from gateway.dialects.registry import sniff_completion_dialect
from gateway.dialects.render import RENDERERS, Renderer, sse
from gateway.dialects.spec import Dialect
from gateway.errors import Forbidden, GatewayError, InvalidRequest, Unauthorized
from gateway.router import Route, Router, RunInfo
from gateway.streaming import Tally, gather
from policies.base import Principal, Ticket
from policies.factory import Policies
from policies.tokens import count_prompt_tokens

_decode = msgspec.json.decode
# Tokens reserved for a request that names no max_tokens and whose model's window is unknown;
# settled to the real count afterwards.
DEFAULT_RESERVATION = 1024
JSON = "application/json"
SSE = "text/event-stream"


@dataclass(frozen=True, slots=True)
class Endpoint:
    kind: RequestKind
    dialect: Dialect | None  # None: told by the body (``/v1/completions`` serves several)
    renderer: str | None = None  # default: the dialect's name
    model_optional: bool = False  # llama.cpp's native endpoint serves its one model unnamed


@dataclass(slots=True)
class Reply:
    status: int
    body: bytes | AsyncIterator[bytes]
    headers: dict[str, str] = field(default_factory=dict)
    media_type: str = JSON


def bearer_key(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("authorization")
    if auth:
        scheme, _, token = auth.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return headers.get("x-api-key") or None


class Gateway:
    def __init__(self, config: Config, router: Router, policies: Policies) -> None:
        self.config = config
        self.router = router
        self.policies = policies
        self._background: set[asyncio.Task[None]] = set()

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        raw = bearer_key(headers)
        if raw is None:
            raise Unauthorized("missing API key: send Authorization: Bearer <key> or x-api-key")
        principal = await self.policies.keys.lookup(raw)
        if principal is None:
            raise Unauthorized("invalid API key")  # never echo the key
        return principal

    async def handle(self, ep: Endpoint, headers: Mapping[str, str], raw: bytes) -> Reply:
        body: object = None
        bad_json = False
        try:
            body = _decode(raw)
        except msgspec.DecodeError:
            bad_json = True
        if ep.model_optional and isinstance(body, dict) and body.get("model") is None:
            body["model"] = "default"
        try:
            dialect = ep.dialect or sniff_completion_dialect(body, headers)
        except InvalidRequest as e:  # a header, not a body field: OpenAI's plain error shape
            return self.error("chat", e)
        shape = ep.renderer or dialect.name
        try:
            principal = await self.authenticate(headers)
            if bad_json:
                raise InvalidRequest("the request body is not valid JSON")
            req = parse_request(dialect, body, kind=ep.kind, strict=principal.strict)
            route = self._route(req, principal)
            ticket, prompt_tokens = await self._admit(req, route, principal)
        except GatewayError as e:
            return self.error(shape, e)
        out_headers = dict(ticket.headers)
        dropped = self._dropped(req, route)
        if dropped:
            out_headers["x-switchyard-warning"] = "unknown parameter(s) dropped: " + ", ".join(dropped)
        renderer = RENDERERS[shape](req)
        info = RunInfo(prompt_tokens=prompt_tokens)
        tally = Tally(prompt_tokens)
        chunks = self.router.stream(req, route, info)
        if req.stream:
            return await self._stream(shape, renderer, chunks, tally, ticket, info, out_headers)
        return await self._whole(shape, renderer, chunks, tally, ticket, info, out_headers)

    # -- steps ---------------------------------------------------------------------------

    def _route(self, req: CanonicalRequest, principal: Principal) -> Route:
        if req.model in ("", "default") and principal.default_model:
            req.model = principal.default_model
        route = self.router.resolve(req.model)
        if not (principal.may_use(route.group) and principal.may_use(req.model)):
            raise Forbidden(f"key {principal.key_id} may not use model {req.model}", param="model")
        if req.model == "default":
            req.model = route.group  # answer with the model that served, as llama.cpp does
        if req.timeout is None and principal.timeout is not None:
            req.timeout = principal.timeout
        return route

    async def _admit(self, req: CanonicalRequest, route: Route,
                     principal: Principal) -> tuple[Ticket, int]:
        backend = route.targets[0].backend
        counted = await backend.count_tokens(req) if backend.ready else None
        prompt_tokens = counted if counted is not None else count_prompt_tokens(req, route.model)
        max_tokens = req.max_tokens
        if max_tokens is None or max_tokens < 0:
            default = sampling_defaults(req.dialect).get("max_tokens") if req.kind == "completion" else None
            max_tokens = default if isinstance(default, int) and default > 0 else (
                max(route.model.context_window - prompt_tokens, 1) if route.model.context_window
                else DEFAULT_RESERVATION)
        choices = len(req.prompt or [None]) * max(req.best_of or 1, req.n or 1)
        ticket = await self.policies.policy.admit(
            principal, route.group, prompt_tokens=prompt_tokens, max_tokens=max_tokens * choices,
            fail_open=route.fail_open)
        return ticket, prompt_tokens

    @staticmethod
    def _dropped(req: CanonicalRequest, route: Route) -> list[str]:
        if not req.extra:
            return []
        if all(t.deployment.backend == "upstream" and t.deployment.dialect == req.dialect
               for t in route.targets):
            return []
        return sorted(req.extra)

    def error(self, shape: str, e: GatewayError) -> Reply:
        status, body = error_bytes(shape, e)
        return Reply(status, body, dict(e.headers))

    # -- answers -------------------------------------------------------------------------

    async def _whole(self, shape: str, renderer: Renderer, chunks: AsyncIterator[Chunk], tally: Tally,
                     ticket: Ticket, info: RunInfo, headers: dict[str, str]) -> Reply:
        got: list[Chunk] = []
        status = 200
        try:
            async for ch in chunks:
                tally.add(ch)
                got.append(ch)
        except GatewayError as e:
            status = e.status
            await self._settle(ticket, tally, status, info)
            reply = self.error(shape, e)
            reply.headers.update(headers)
            reply.headers.update(_served(info))  # which deployments were tried, how often
            return reply
        finally:
            await chunks.aclose()
        await self._settle(ticket, tally, status, info)
        headers.update(_served(info))
        body = msgspec.json.encode(renderer.completion(gather(got, tally.usage())))
        return Reply(200, body, headers)

    async def _stream(self, shape: str, renderer: Renderer, chunks: AsyncIterator[Chunk], tally: Tally,
                      ticket: Ticket, info: RunInfo, headers: dict[str, str]) -> Reply:
        # Wait for the first chunk so that a failure before any byte gets a real status code.
        try:
            first = await anext(chunks)
        except StopAsyncIteration:
            first = None
        except GatewayError as e:
            await chunks.aclose()
            await self._settle(ticket, tally, e.status, info)
            reply = self.error(shape, e)
            reply.headers.update(headers)
            reply.headers.update(_served(info))  # which deployments were tried, how often
            return reply
        headers.update(_served(info))
        headers["cache-control"] = "no-cache"
        return Reply(200, self._events(shape, renderer, first, chunks, tally, ticket, info), headers, SSE)

    async def _events(self, shape: str, renderer: Renderer, first: Chunk | None,
                      chunks: AsyncIterator[Chunk], tally: Tally, ticket: Ticket,
                      info: RunInfo) -> AsyncIterator[bytes]:
        status = 499  # until the stream ends normally: the client went away
        last: Chunk | None = None
        try:
            ch = first
            held: list[bytes] = []  # events already rendered while more chunks are in hand
            while ch is not None:
                tally.add(ch)
                if ch.text or ch.finish_reason or ch.logprobs or ch.role or ch.tool_calls:
                    last = ch if ch.finish_reason else last
                    held.append(renderer.event(ch))
                # The first event goes out at once (time to first byte); later ones that arrived
                # together go out together.
                if held and (not ch.more or ch is first):
                    yield held[0] if len(held) == 1 else b"".join(held)
                    held = []
                ch = await anext(chunks, None)
            status = 200
            held.append(renderer.closing(tally.usage(), last))
            yield b"".join(held)
        except GatewayError as e:
            status = e.status
            yield sse(error_json(shape, e)[1])
            yield renderer.end()
        finally:
            # A cancelled stream cannot await here safely: settle in a task of its own.
            task = asyncio.ensure_future(self._close_and_settle(chunks, ticket, tally, status, info))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _close_and_settle(self, chunks: AsyncIterator[Chunk], ticket: Ticket, tally: Tally,
                                status: int, info: RunInfo) -> None:
        try:
            await chunks.aclose()
        finally:
            await self._settle(ticket, tally, status, info)

    async def _settle(self, ticket: Ticket, tally: Tally, status: int, info: RunInfo) -> None:
        latency = (time.monotonic() - ticket.started) * 1000 if ticket.started else 0.0
        await self.policies.policy.settle(ticket, tally.usage(), status=status,
                                          deployment=info.deployment, latency_ms=latency)

    async def drain(self) -> None:
        """Wait for background settlements (shutdown, tests)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)


def _served(info: RunInfo) -> dict[str, str]:
    return info.headers()  # x-switchyard-deployment, -attempts, and -fallback when one served
