"""A tenant whose clients stop reading their streams cannot hold a deployment's connection pool
(issue 23, item 1): team t opens as many never-read streams as the deployment has connections
(``max_connections: 4``); team u's request is still answered within its own deadline. Three
bounds, each tested alone: the client's write timeout cuts the stalled streams (settled as cut),
the stalled streams' own deadline gives their pool slots back, and a wait for a slot ends with
the waiting request's deadline (a 504 naming the deployment; where that deadline is the
deployment's own ``timeout``, the transport's: tests/providers/test_h1.py)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from switchyard.routing import Router
from tests.gateway.conftest import KEY, serve
from tests.providers.wire import completion, json_answer
from tests.routing.conftest import config, dep, group, records

OTHER = "sk-tenant-b"
POOL = 4


def tenants(t_timeout: float | None = None, u_timeout: float | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"id": "a", "team": "t", "key": KEY}
    u: dict[str, Any] = {"id": "b", "team": "u", "key": OTHER}
    if t_timeout:
        t["timeout"] = t_timeout
    if u_timeout:
        u["timeout"] = u_timeout
    return {"teams": [{"name": "t"}, {"name": "u"}], "keys": [t, u]}


@asynccontextmanager
async def endless_upstream() -> AsyncIterator[tuple[int, list[str]]]:
    """An upstream that answers a streamed request with 16 KB events for as long as anyone reads
    them, and any other request at once. Yields (port, "stream"/"whole" per request)."""
    seen: list[str] = []
    piece = {"id": "up", "choices": [{"index": 0, "text": "x" * 16384, "finish_reason": None}]}
    event = b"data: %s\n\n" % json.dumps(piece).encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                body = json.loads(await reader.readexactly(length))
                if not body.get("stream"):
                    seen.append("whole")
                    writer.write(json_answer(completion("fine")))
                    await writer.drain()
                    continue
                seen.append("stream")
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")
                for _ in range(100_000):  # bounded: ~1.6 GB, far more than any buffer holds
                    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                    await writer.drain()
                return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], seen
    finally:
        server.close()


async def stalled_stream(port: int, small: bool = True) -> socket.socket:
    """A client that asks for a stream and reads none of it (with ``small``, a tiny receive
    buffer: the gateway's send buffer fills sooner)."""
    sock = socket.socket()
    if small:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    body = json.dumps({"model": "m/x", "prompt": "go", "max_tokens": 100_000, "stream": True}).encode()
    await asyncio.get_running_loop().sock_sendall(sock, (
        b"POST /v1/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer %s\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s") % (KEY.encode(), len(body), body))
    return sock


async def starve(port: int, upstream: list[str], stack: AsyncExitStack) -> None:
    """Team t fills the deployment's pool with streams it never reads."""
    for _ in range(POOL):
        stack.callback((await stalled_stream(port)).close)
    for _ in range(500):  # bounded: until the upstream streams to all of them
        if upstream.count("stream") == POOL:
            break
        await asyncio.sleep(0.01)
    assert upstream.count("stream") == POOL


def setup(up: int, router: dict[str, Any] | None = None, **kw: Any) -> Router:
    d = dep("only", f"http://127.0.0.1:{up}/v1", max_connections=POOL)
    return Router(config(group("m/x", d), router=router, **kw))


def other_team(client: Any) -> Any:
    return client.post("/v1/completions", json={"model": "m/x", "prompt": "hi", "max_tokens": 2},
                       headers={"authorization": f"Bearer {OTHER}"})


async def test_a_client_that_stops_reading_is_cut_and_frees_the_pool():
    async with endless_upstream() as (up, seen), AsyncExitStack() as stack:
        router = setup(up, server={"write_timeout": 0.5}, **tenants())
        async with serve(router.config, router=router) as client:
            port = client.base_url.port
            await starve(port, seen, stack)
            started = time.monotonic()
            r = await asyncio.wait_for(other_team(client), 20)
            took = time.monotonic() - started
            recs = [x for x in await records(client) if x.key_id == "a"]
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == "fine" and took < 15
    # Each stalled stream was cut by the write timeout and settled as cut (what it got is billed).
    assert len(recs) == POOL and all(x.cut and x.status == 499 for x in recs), recs
    assert router.resolve("m/x").targets[0].health.inflight == 0


async def test_a_stalled_streams_deadline_gives_its_connection_back():
    async with endless_upstream() as (up, seen), AsyncExitStack() as stack:
        # Team t's key gives each request 1 s; nobody's write timeout fires in this test.
        router = setup(up, server={"write_timeout": 600, "shutdown_grace": 0.5}, **tenants(t_timeout=1))
        async with serve(router.config, router=router) as client:
            await starve(client.base_url.port, seen, stack)
            r = await asyncio.wait_for(other_team(client), 20)
    assert r.status_code == 200, r.text
    assert seen.count("whole") == 1


async def test_a_wait_for_a_connection_ends_with_the_requests_deadline():
    async with endless_upstream() as (up, seen), AsyncExitStack() as stack:
        # Team u's key gives each request 1 s; team t's streams hold the pool for ten minutes.
        router = setup(up, server={"write_timeout": 600, "shutdown_grace": 0.5}, **tenants(u_timeout=1))
        async with serve(router.config, router=router) as client:
            await starve(client.base_url.port, seen, stack)
            started = time.monotonic()
            r = await asyncio.wait_for(other_team(client), 20)
            took = time.monotonic() - started
    assert r.status_code == 504, r.text
    message = r.json()["error"]["message"]
    assert "deadline of 1 s" in message and "m/x/only" in message and took < 10, message
    assert "whole" not in seen  # it never reached the upstream


async def test_a_slow_reader_is_not_cut():
    """The write timeout is for a client that takes nothing: one that reads, slowly, keeps its
    stream (a period of write_timeout in which it took a byte counts as progress)."""
    async with endless_upstream() as (up, seen), AsyncExitStack() as stack:
        router = setup(up, server={"write_timeout": 0.5, "shutdown_grace": 0.5}, **tenants())
        async with serve(router.config, router=router) as client:
            sock = await stalled_stream(client.base_url.port, small=False)
            stack.callback(sock.close)
            loop = asyncio.get_running_loop()
            got = 0
            for _ in range(60):  # ~3 s at ~1 MB/s, far slower than the upstream writes
                got += len(await asyncio.wait_for(loop.sock_recv(sock, 65536), 5))
                await asyncio.sleep(0.05)
            inflight = router.resolve("m/x").targets[0].health.inflight  # still in flight: not cut
    assert got > 1_000_000 and seen == ["stream"]
    assert inflight == 1
