"""Sending one request to an upstream and getting its answer, over whichever transport the
deployment has: ``H1Transport`` gets the request as pre-built wire bytes (no per-request httpx
objects: they cost ~50 us a call); any other httpx transport (respx's mock in tests, httpx's own)
gets an ``httpx.Request``. The provider sees one interface either way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

import httpx

from switchyard.providers.h1 import H1Transport, header_lines, origin_of

Kind = str  # "completion" | "chat"


class Answered(Protocol):
    @property
    def status(self) -> int: ...
    def header(self, name: str) -> str | None: ...
    def __aiter__(self) -> AsyncIterator[bytes]: ...
    async def read(self) -> bytes: ...
    async def aclose(self) -> None: ...


class Exchange(Protocol):
    async def send(self, kind: Kind, body: bytes, extra_headers: dict[str, str] | None,
                   timeout: float, connect_timeout: float) -> Answered: ...

    async def aclose(self) -> None: ...


class WireExchange:
    def __init__(self, transport: H1Transport, urls: dict[Kind, httpx.URL], headers: dict[str, str]) -> None:
        self.transport = transport
        self.origins = {k: origin_of(u) for k, u in urls.items()}
        host = next(iter(urls.values())).netloc
        fixed = header_lines((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items())
        self.prefix = {k: b"POST %s HTTP/1.1\r\nhost: %s\r\n%s" % (u.raw_path, host, fixed)
                       for k, u in urls.items()}

    async def send(self, kind: Kind, body: bytes, extra_headers: dict[str, str] | None,
                   timeout: float, connect_timeout: float) -> Answered:
        # Caller headers (checked when parsed) and, later, the gateway's own (request id, trace).
        extra = header_lines((k.encode("latin-1"), v.encode("latin-1"))
                             for k, v in extra_headers.items()) if extra_headers else b""
        wire = b"%s%scontent-length: %d\r\n\r\n%s" % (self.prefix[kind], extra, len(body), body)
        deadline = asyncio.get_running_loop().time() + timeout
        return await self.transport.open(self.origins[kind], wire, deadline=deadline,
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
    def __init__(self, transport: httpx.AsyncBaseTransport, urls: dict[Kind, httpx.URL],
                 headers: dict[str, str]) -> None:
        self.transport = transport
        self.urls = urls
        self.headers = headers

    async def send(self, kind: Kind, body: bytes, extra_headers: dict[str, str] | None,
                   timeout: float, connect_timeout: float) -> Answered:
        headers = {**self.headers, **extra_headers} if extra_headers else self.headers
        request = httpx.Request("POST", self.urls[kind], content=body, headers=headers, extensions={
            "timeout": {"connect": connect_timeout, "read": timeout, "write": timeout, "pool": timeout}})
        return _HttpxAnswer(await self.transport.handle_async_request(request))

    async def aclose(self) -> None:
        await self.transport.aclose()


def make_exchange(transport: httpx.AsyncBaseTransport, urls: dict[Kind, httpx.URL],
                  headers: dict[str, str]) -> Exchange:
    if isinstance(transport, H1Transport):
        return WireExchange(transport, urls, headers)
    return HttpxExchange(transport, urls, headers)
