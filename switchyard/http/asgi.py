"""Raw ASGI for the hot endpoints: bytes in, bytes or a stream out.

Litestar's request/response path costs about 90 us a call here, and its middleware wraps every
``send`` (each stream chunk); the completion endpoints need none of it (no DTOs, no dependency
injection: the body is parsed by the dialect tables). ``Switchyard`` dispatches them by exact path
ahead of Litestar, which serves everything else (models, health, admin, OpenAPI, lifespan).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import MutableMapping
from typing import Any

from switchyard.core.errors import (
    GatewayError,
    InvalidRequest,
    MethodNotAllowed,
    PayloadTooLarge,
    RequestTimeout,
)
from switchyard.core.logs import REQUEST
from switchyard.core.propagation import REQUEST_ID
from switchyard.dialects.errors import error_bytes
from switchyard.gateway.context import RequestContext, request_ids
from switchyard.gateway.pipeline import Gateway
from switchyard.gateway.types import JSON, Endpoint
from switchyard.http.access import AccessLog
from switchyard.http.disconnect import DISCONNECT, Disconnect
from switchyard.http.types import ANSWER, Answering, ASGIApp, Receive, Scope, Send

# Credentials must come once: with two, which one a proxy or a log saw is anybody's guess.
_SINGLE = (b"authorization", b"x-api-key")
# CR, LF and NUL never reach the wire in a header value, whoever wrote it.
_UNSAFE = str.maketrans({"\r": " ", "\n": " ", "\0": " "})


def error_shape(path: str) -> str:
    """The error shape of what is refused before a body is read (a wrong method, a bad header, a
    malformed request): Anthropic's under /v1/messages (its SDKs and Claude Code read no other),
    OpenAI's plain one elsewhere."""
    return "anthropic" if path == "/v1/messages" or path.startswith("/v1/messages/") else "chat"


class ClientGone(Exception):
    """The client disconnected while its request body was being read."""


def ids_of(scope: Scope) -> tuple[str, str]:
    """The request's id for the caller and the gateway's own (``context.request_ids``)."""
    for k, v in scope["headers"]:  # (a loop, not next() over a generator: 0.34 us against 0.60)
        if k == b"x-request-id":
            return request_ids(v.decode("latin-1") if v else None)
    return request_ids(None)


def headers_of(scope: Scope) -> dict[str, str]:
    """Request headers by lower-cased name (ASGI lower-cases them). Raises ``InvalidRequest`` for
    a repeated credential header."""
    out: dict[str, str] = {}
    for k, v in scope["headers"]:
        name = k.decode("latin-1")
        if name in out and k in _SINGLE:
            raise InvalidRequest(f"send one {name} header, not several", param=name)
        out[name] = v.decode("latin-1")
    return out


async def read_body(receive: Receive, limit: int, timeout: float) -> bytes:
    msg = await receive()
    if msg["type"] == "http.disconnect":
        raise ClientGone
    body = msg.get("body", b"")
    if len(body) > limit:
        raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes", param="body")
    if not msg.get("more_body"):
        return body  # the common case: the whole body came in one piece, no timer needed
    try:
        async with asyncio.timeout(timeout):
            return await _rest(receive, [body], len(body), limit)
    except TimeoutError:
        raise RequestTimeout(f"the request body did not arrive within {timeout:g} s", param="body") from None


async def _rest(receive: Receive, chunks: list[bytes], size: int, limit: int) -> bytes:
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ClientGone
        body = msg.get("body", b"")
        size += len(body)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes", param="body")
        chunks.append(body)
        if not msg.get("more_body"):
            return b"".join(chunks)


def encode_headers(headers: dict[str, str], media_type: str) -> list[tuple[bytes, bytes]]:
    # The usual case: no CR, LF or NUL to blank out, so no translation per value (7.2 -> 4.6 us).
    clean = "".join(headers.values()).isprintable()
    return [(b"content-type", media_type.encode()),
            *((k.encode("latin-1", "replace"),
               (v if clean else v.translate(_UNSAFE)).encode("latin-1", "replace"))
              for k, v in headers.items())]


# A header name as the server writes it: RFC 9110's tchar, lower-cased (a name in capitals goes
# the ASGI way, where the server lower-cases it).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9a-z]+")
# Names whose meaning the server keeps to itself (how the body is framed, whether the
# connection stays): an answer that sets one goes the ASGI way, where the server reads them.
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection"})
_CRLF = "\r\n"
_NAMED: set[str] = set()  # names already found fit for ``head_lines`` (the gateway's own few)


def head_lines(headers: dict[str, str], media_type: str, request_id: str) -> bytes | None:
    """An answer's header lines for the server's answer extension (``http.types.Answering``);
    None when one needs the careful way (a control character or a byte outside latin-1 in a
    value, a name that is no lower-case token, a framing header), which ``encode_headers`` and
    the server take."""
    if not _NAMED.issuperset(headers):
        if any(k in _FRAMING or not _TOKEN.fullmatch(k) for k in headers):
            return None
        if len(_NAMED) < 256:
            _NAMED.update(headers)
    if not "".join(headers.values()).isprintable():
        return None
    lines = "\r\n".join(map(": ".join, headers.items()))  # (names and values both str)
    text = f"content-type: {media_type}\r\n{lines}{_CRLF if lines else ''}{REQUEST_ID}: {request_id}\r\n"
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return None


class AsgiResponder:
    """``gateway.types.Responder`` over one ASGI request: the answer, the request id on it, and a watch
    for the client leaving."""

    __slots__ = ("_answer", "_hook", "_watcher", "ctx", "finished", "gone", "receive", "send", "started")

    def __init__(self, ctx: RequestContext, scope: Scope, send: Send, receive: Receive) -> None:
        self.ctx = ctx
        self.send = send
        self.receive = receive
        self.started = False
        self.finished = False
        self.gone = False
        extensions = scope.get("extensions") or {}
        self._hook: Disconnect | None = extensions.get(DISCONNECT)
        self._answer: Answering | None = extensions.get(ANSWER)  # (our own server's)
        self._watcher: asyncio.Future[None] | None = None

    async def whole(self, status: int, headers: dict[str, str], body: bytes, media_type: str = JSON) -> None:
        self.started = self.finished = True
        self.unwatch()
        self.ctx.first_byte = time.monotonic()
        if self._answer is not None and (lines := head_lines(headers, media_type, self.ctx.id)) is not None:
            return await self._answer.whole(status, lines, body)
        raw = encode_headers(headers, media_type)
        raw.append((b"content-length", str(len(body)).encode()))
        raw.append((REQUEST_ID.encode(), self.ctx.id.encode()))
        await self.send({"type": "http.response.start", "status": status, "headers": raw})
        await self.send({"type": "http.response.body", "body": body})

    async def start(self, status: int, headers: dict[str, str], media_type: str) -> None:
        self.started = True
        if self._answer is not None and (lines := head_lines(headers, media_type, self.ctx.id)) is not None:
            return await self._answer.begin(status, lines)
        raw = encode_headers(headers, media_type)
        raw.append((REQUEST_ID.encode(), self.ctx.id.encode()))
        await self.send({"type": "http.response.start", "status": status, "headers": raw})

    async def body(self, data: bytes) -> None:
        if self.ctx.first_byte is None:
            self.ctx.first_byte = time.monotonic()
        if self._answer is not None:  # (whichever way its head went)
            return await self._answer.part(data, True)
        await self.send({"type": "http.response.body", "body": data, "more_body": True})

    async def end(self, data: bytes) -> None:
        self.finished = True
        self.unwatch()
        if data and self.ctx.first_byte is None:
            self.ctx.first_byte = time.monotonic()
        if self._answer is not None:
            return await self._answer.part(data, False)
        await self.send({"type": "http.response.body", "body": data, "more_body": False})

    def watch(self) -> None:
        hook = self._hook
        # Our own protocol names the task serving the request; under any other server it is the
        # one asking (the gateway watches from the task that serves).
        task = hook.task if hook is not None and hook.task is not None else asyncio.current_task()
        if task is None:
            return

        def left() -> None:
            if not self.finished:
                self.gone = True
                task.cancel()

        if hook is not None:  # our own protocol tells us (http.protocol)
            hook.callback = left
            return

        async def watch() -> None:  # any other ASGI server: a task waits for the disconnect
            while (await self.receive())["type"] != "http.disconnect":
                pass
            left()  # (after the last byte, the server reports a "disconnect" too: see ``left``)

        self._watcher = asyncio.ensure_future(watch())

    def unwatch(self) -> None:
        if self._hook is not None:
            self._hook.done = True
            self._hook.callback = None
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None


def endpoint_app(gw: Gateway, ep: Endpoint, path: str) -> ASGIApp:
    server = gw.config.server
    default_shape = ep.renderer or (ep.dialect.name if ep.dialect else "openai")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        rid, own = ids_of(scope)
        ctx = RequestContext(rid, path)
        ctx.run.upstream_id = own  # what upstream calls carry (Router._try)
        REQUEST.set(rid)  # every line logged while serving it names it
        if gw.tracing is not None:
            gw.tracing.begin(ctx, scope["headers"])
        ctx.shape = default_shape
        out = AsgiResponder(ctx, scope, send, receive)
        gw.begin()
        try:
            if scope["method"] != "POST":
                ctx.shape = error_shape(path)
                e: GatewayError = MethodNotAllowed(f"{path} takes POST")
                await gw.send_error(ctx, out, e)
                return gw.refused(ctx, e)  # counted as a request with no valid key: none was read
            try:
                headers = headers_of(scope)
                raw = await read_body(receive, server.max_body_bytes, server.body_timeout)
            except GatewayError as e:
                await gw.send_error(ctx, out, e)
                return gw.refused(ctx, e)
            except ClientGone:
                ctx.status = 499
                return
            await gw.serve(ctx, ep, headers, raw, out)
        except asyncio.CancelledError:  # the stopping server cancelled it before it was admitted
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            await gw.cut_by_shutdown(ctx, out)
        finally:
            out.unwatch()
            gw.finished(ctx)

    return app


# Probes and scrapes come every few seconds and say nothing an operator needs line by line.
UNLOGGED = frozenset({"/health", "/ready", "/metrics"})


class Switchyard:
    """The ASGI application served: hot paths first, then Litestar."""

    def __init__(self, litestar: Any, hot: dict[str, ASGIApp], gateway: Gateway,
                 access: AccessLog | None = None) -> None:
        self.litestar = litestar
        self.hot = hot
        self.gateway = gateway
        self.access = access

    @property
    def state(self) -> Any:
        return self.litestar.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.litestar(scope, receive, send)
        handler = self.hot.get(scope["path"])
        if handler is not None:
            return await handler(scope, receive, send)
        caller_id = ids_of(scope)[0]
        REQUEST.set(caller_id)  # the admin API's and console's log lines name it too
        rid = caller_id.encode()
        status = 0

        async def send_with_id(msg: MutableMapping[str, Any]) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = msg["status"]
                msg["headers"] = [*msg.get("headers", ()), (b"x-request-id", rid)]
            await send(msg)

        started = time.monotonic()
        try:
            await self._litestar(scope, receive, send_with_id)
        finally:
            if self.access is not None and scope["path"] not in UNLOGGED:
                self.access.observe_other(rid.decode(), scope["method"], scope.get("path_template") or "-",
                                          status, time.monotonic() - started)

    async def _litestar(self, scope: Scope, receive: Receive, send_with_id: Send) -> None:
        try:  # the admin API and /v1/models follow the completion endpoints' rule
            headers_of(scope)
        except InvalidRequest as e:
            return await _answer(send_with_id, e, error_shape(scope["path"]))
        timed = TimedBody(receive, send_with_id, self.gateway.config.server.body_timeout,
                          error_shape(scope["path"]))
        await self.litestar(scope, timed.receive, timed.send)


async def _answer(send: Send, e: GatewayError, shape: str,
                  headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    status, body = error_bytes(shape, e)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


class TimedBody:
    """Litestar's routes (the admin API) get the completion endpoints' rule for a slow body: a
    408 in the OpenAI error shape once ``timeout`` seconds pass before its end, the connection
    closed. Litestar then hears a disconnect; whatever it answers to that is dropped."""

    __slots__ = ("_deadline", "_receive", "_send", "answered", "shape", "timeout")

    def __init__(self, receive: Receive, send: Send, timeout: float, shape: str = "chat") -> None:
        self.shape = shape
        self._receive = receive
        self._send = send
        self.timeout = timeout
        self._deadline: float | None = asyncio.get_running_loop().time() + timeout
        self.answered = False

    async def receive(self) -> MutableMapping[str, Any]:
        if self.answered:
            return {"type": "http.disconnect"}
        if self._deadline is None:  # the body is in: no clock on whatever else is awaited
            return await self._receive()
        try:
            async with asyncio.timeout_at(self._deadline):
                msg = await self._receive()
        except TimeoutError:
            self.answered = True
            await _answer(self._send, RequestTimeout(
                f"the request body did not arrive within {self.timeout:g} s", param="body"),
                self.shape, ((b"connection", b"close"),))
            return {"type": "http.disconnect"}
        if msg["type"] != "http.request" or not msg.get("more_body"):
            self._deadline = None
        return msg

    async def send(self, msg: MutableMapping[str, Any]) -> None:
        if not self.answered:
            await self._send(msg)
