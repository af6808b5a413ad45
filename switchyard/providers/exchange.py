"""Sending one request to an upstream and getting its answer, over whichever transport the
deployment has: ``H1Transport`` gets the request as pre-built wire bytes (no per-request httpx
objects: they cost ~50 us a call); any other httpx transport (respx's mock in tests, httpx's own)
gets an ``httpx.Request``. The provider sees one interface either way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

import httpx

from switchyard.core.canonical import RequestKind
from switchyard.providers.h1 import H1Transport, header_lines, origin_of

Kind = RequestKind
Headers = list[tuple[str, str]]
_MAX_TARGETS = 1024  # request prefixes kept per exchange (one per path: wildcard routes vary the model)


class Answered(Protocol):
    @property
    def status(self) -> int: ...
    def header(self, name: str) -> str | None: ...
    def __aiter__(self) -> AsyncIterator[bytes]: ...
    async def read(self) -> bytes: ...
    async def aclose(self) -> None: ...


class Exchange(Protocol):
    """``target``: the path and query below the deployment's base URL (the provider row's path
    for the request's kind, stream-ness and model). ``signed``: per-request headers computed over
    this very body (SigV4); the caller's and the gateway's own come in ``extra_headers``."""

    host: str

    async def send(self, target: str, body: bytes, extra_headers: dict[str, str] | None,
                   timeout: float, connect_timeout: float, signed: Headers | None = None) -> Answered: ...

    async def aclose(self) -> None: ...


def _lines(headers: dict[str, str] | Headers | None) -> bytes:
    if not headers:
        return b""
    items = headers.items() if isinstance(headers, dict) else headers
    return header_lines((k.encode("latin-1"), v.encode("latin-1")) for k, v in items)


class WireExchange:
    def __init__(self, transport: H1Transport, base: httpx.URL, headers: dict[str, str]) -> None:
        self.transport = transport
        self.origin = origin_of(base)
        self.host = base.netloc.decode("ascii")
        self.base_path = base.raw_path.rstrip(b"/")
        self.fixed = b"host: %s\r\n%s" % (base.netloc, _lines(headers))
        self.prefix: dict[str, bytes] = {}  # target -> request line and fixed headers

    def _prefix(self, target: str) -> bytes:
        p = self.prefix.get(target)
        if p is None:
            if len(self.prefix) >= _MAX_TARGETS:
                self.prefix.clear()
            p = self.prefix[target] = b"POST %s%s HTTP/1.1\r\n%s" % (
                self.base_path, target.encode("ascii"), self.fixed)
        return p

    async def send(self, target: str, body: bytes, extra_headers: dict[str, str] | None,
                   timeout: float, connect_timeout: float, signed: Headers | None = None) -> Answered:
        # Caller headers (checked when parsed) and, later, the gateway's own (request id, trace).
        extra = _lines(extra_headers) + _lines(signed) if signed else _lines(extra_headers)
        wire = b"%s%scontent-length: %d\r\n\r\n%s" % (self._prefix(target), extra, len(body), body)
        deadline = asyncio.get_running_loop().time() + timeout
        return await self.transport.open(self.origin, wire, deadline=deadline,
                                         connect_timeout=connect_timeout)

    async def aclose(self) -> None:
        await self.transport.aclose()


class _HttpxAnswer:
    def __init__(self, resp: httpx.Response) -> None:
        self.resp = resp

    @property
    def status(self) -> int:
        return self.resp.status_code

    def header(self, name: str) -> str | None:
        return self.resp.headers.get(name)

    def __aiter__(self) -> AsyncIterator[bytes]:
        if self.resp.is_stream_consumed:  # a transport that answered already read (mocks)
            return _once(self.resp.content)
        return self.resp.aiter_raw()

    async def read(self) -> bytes:
        return await self.resp.aread()

    async def aclose(self) -> None:
        await self.resp.aclose()


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


class HttpxExchange:
    def __init__(self, transport: httpx.AsyncBaseTransport, base: httpx.URL, headers: dict[str, str]) -> None:
        self.transport = transport
        self.base = str(base).rstrip("/")
        self.host = base.netloc.decode("ascii")
        self.headers = headers

    async def send(self, target: str, body: bytes, extra_headers: dict[str, str] | None,
                   timeout: float, connect_timeout: float, signed: Headers | None = None) -> Answered:
        headers = {**self.headers, **extra_headers} if extra_headers else dict(self.headers)
        if signed:
            headers.update(signed)
        request = httpx.Request("POST", self.base + target, content=body, headers=headers, extensions={
            "timeout": {"connect": connect_timeout, "read": timeout, "write": timeout, "pool": timeout}})
        return _HttpxAnswer(await self.transport.handle_async_request(request))

    async def aclose(self) -> None:
        await self.transport.aclose()


def make_exchange(transport: httpx.AsyncBaseTransport, base: httpx.URL, headers: dict[str, str]) -> Exchange:
    if isinstance(transport, H1Transport):
        return WireExchange(transport, base, headers)
    return HttpxExchange(transport, base, headers)
