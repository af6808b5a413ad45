"""Raw ASGI for the hot endpoints: bytes in, bytes or a stream out.

Litestar's request/response path costs about 90 us a call here, and its middleware wraps every
``send`` (each stream chunk); the completion endpoints need none of it (no DTOs, no dependency
injection: the body is parsed by the dialect tables). ``Switchyard`` dispatches them by exact path
ahead of Litestar, which serves everything else (models, health, admin, OpenAPI, lifespan).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from gateway.errors import MethodNotAllowed, PayloadTooLarge
from gateway.pipeline import Endpoint, Gateway, Reply

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _Headers(dict[str, str]):
    """Request headers, lower-cased names (ASGI already lower-cases them)."""

    @classmethod
    def of(cls, scope: Scope) -> _Headers:
        return cls((k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"])


async def read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ConnectionResetError("client went away")
        body = msg.get("body", b"")
        size += len(body)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes", param="body")
        chunks.append(body)
        if not msg.get("more_body"):
            return b"".join(chunks)


def _head(reply: Reply) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", reply.media_type.encode()),
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.items())]


async def send_reply(reply: Reply, send: Send, receive: Receive) -> None:
    if isinstance(reply.body, bytes):
        headers = _head(reply)
        headers.append((b"content-length", str(len(reply.body)).encode()))
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": reply.body})
        return
    await send({"type": "http.response.start", "status": reply.status, "headers": _head(reply)})
    await _stream(reply.body, send, receive)


async def _stream(body: AsyncIterator[bytes], send: Send, receive: Receive) -> None:
    """Relay the stream; a client that disconnects cancels it (which closes the upstream)."""
    me = asyncio.current_task()
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        if me is not None:
            me.cancel()

    watcher: asyncio.Future[None] | None = None
    try:
        async for data in body:
            if data:
                await send({"type": "http.response.body", "body": data, "more_body": True})
            if watcher is None:  # started after the first bytes: they go out first
                watcher = asyncio.ensure_future(watch())
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        if not gone:
            raise
    finally:
        if watcher is not None:
            watcher.cancel()
        await body.aclose()  # type: ignore[attr-defined]


def endpoint_app(gw: Gateway, ep: Endpoint) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    limit = gw.config.server.max_body_bytes

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            reply = gw.error("chat", MethodNotAllowed(f"{scope['path']} takes POST"))
            return await send_reply(reply, send, receive)
        headers = _Headers.of(scope)
        try:
            raw = await read_body(receive, limit)
        except PayloadTooLarge as e:
            reply = gw.error(ep.renderer or (ep.dialect.name if ep.dialect else "openai"), e)
            return await send_reply(reply, send, receive)
        except ConnectionResetError:
            return
        await send_reply(await gw.handle(ep, headers, raw), send, receive)

    return app


ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Switchyard:
    """The ASGI application served: hot paths first, then Litestar."""

    def __init__(self, litestar: Any, hot: dict[str, ASGIApp], gateway: Gateway) -> None:
        self.litestar = litestar
        self.hot = hot
        self.gateway = gateway

    @property
    def state(self) -> Any:
        return self.litestar.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            handler = self.hot.get(scope["path"])
            if handler is not None:
                return await handler(scope, receive, send)
        await self.litestar(scope, receive, send)
