"""``switchyard/providers/h1.py`` against real loopback servers that answer with raw bytes: every way
a response can be framed, servers that close, stall or send what nobody asked for."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from switchyard.providers.h1 import MAX_HEAD, H1Transport, _Slots, header_lines

REQUEST = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"

Answerer = Callable[[int, bytes], bytes | None]  # (request number, request bytes) -> bytes to send
RESET = b"<reset>"  # an answer that resets the connection (RST, not FIN) without a byte


@asynccontextmanager
async def tcp_server(handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
                     ) -> AsyncIterator[int]:
    """A loopback server running ``handle`` per connection; yields its port. At the end it closes
    every connection a handler left open (one still waiting on a read, say), so no socket
    outlives the test."""
    writers: list[asyncio.StreamWriter] = []

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await handle(reader, writer)

    server = await asyncio.start_server(tracked, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for w in writers:
            w.close()
        await asyncio.sleep(0)  # the transports close on the loop's next turn


@asynccontextmanager
async def raw_server(answer: Answerer, *, close_after: bool = False) -> AsyncIterator[tuple[int, list[int]]]:
    """A server that reads each request and writes ``answer(n, request)``; ``None`` closes the
    connection without a word, ``RESET`` resets it. Yields (port, connection numbers of each
    request)."""
    count = 0
    conns: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count
        me = len({*conns}) + 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)
                body = await reader.readexactly(length)
                count += 1
                conns.append(me)
                out = answer(count, head + body)
                if out is RESET:
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                if out is None:
                    break
                writer.write(out)
                await writer.drain()
                if close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async with tcp_server(handle) as port:
        yield port, conns


def ok(text: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(text), extra, text)


async def fetch(t: H1Transport, port: int) -> tuple[int, bytes]:
    ans = await t.open((b"http", b"127.0.0.1", port), REQUEST, deadline=asyncio.get_running_loop().time() + 5)
    try:
        return ans.status, await ans.read()
    finally:
        await ans.aclose()


async def test_content_length_and_keep_alive_reuse():
    async with raw_server(lambda n, _: ok(b"answer %d" % n)) as (port, conns):
        t = H1Transport()
        assert await fetch(t, port) == (200, b"answer 1")
        assert await fetch(t, port) == (200, b"answer 2")
        assert conns == [1, 1]  # one connection, reused
        await t.aclose()


async def test_chunked_with_extensions_and_trailers():
    body = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: t\r\n\r\n")
    async with raw_server(lambda n, _: body) as (port, conns):
        t = H1Transport()
        assert await fetch(t, port) == (200, b"hello world")
        assert await fetch(t, port) == (200, b"hello world")
        assert conns == [1, 1]
        await t.aclose()


async def test_body_delimited_by_close():
    async with raw_server(lambda n, _: b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end",
                          close_after=True) as (port, conns):
        t = H1Transport()
        assert await fetch(t, port) == (200, b"until the end")
        assert await fetch(t, port) == (200, b"until the end")
        assert conns == [1, 2]  # not reused: the close ended the body
        await t.aclose()


async def test_server_that_closes_after_each_response_is_not_reused():
    async with raw_server(lambda n, _: ok(b"x", b"connection: close\r\n"), close_after=True) as (port, conns):
        t = H1Transport()
        for _ in range(3):
            assert await fetch(t, port) == (200, b"x")
        assert conns == [1, 2, 3]
        await t.aclose()


async def test_pooled_connection_closed_by_the_server_is_retried_once_on_a_new_one():
    async with raw_server(lambda n, _: ok(b"fine"), close_after=True) as (port, conns):
        t = H1Transport()
        assert await fetch(t, port) == (200, b"fine")  # keep-alive as far as the answer says ...
        await asyncio.sleep(0)  # ... but the server closed; we may not have seen the FIN yet
        assert await fetch(t, port) == (200, b"fine")
        assert conns == [1, 2]
        await t.aclose()


async def test_unsolicited_bytes_on_an_idle_connection_discard_it():
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(2)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            writer.write(ok(b"mine %d" % len(writers)))

    async with tcp_server(handle) as port:
        t = H1Transport()
        assert await fetch(t, port) == (200, b"mine 1")
        writers[0].write(ok(b"SMUGGLED"))  # while the connection sits in the pool
        await writers[0].drain()
        await asyncio.sleep(0.05)
        assert await fetch(t, port) == (200, b"mine 2")  # a new connection, not the smuggled answer
        await t.aclose()


async def test_a_chunked_body_s_pieces_arrive_whole_and_a_long_backlog_pauses_reading():
    """httptools hands each HTTP chunk over on its own (into the connection's deque, with no
    Python call a piece): the reader gets them joined, in order; past ``_HIGH_WATER`` unread
    pieces the socket stops being read until the reader catches up."""
    pieces = [b"piece %03d;" % i for i in range(200)]
    finish = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                     + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces))
        await finish.wait()  # the body's end comes once the test has seen reading paused
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with tcp_server(handle) as port:
        t = H1Transport()
        deadline = asyncio.get_running_loop().time() + 5
        ans = await t.open((b"http", b"127.0.0.1", port), REQUEST, deadline=deadline)
        for _ in range(100):
            if ans.conn.paused:
                break
            await asyncio.sleep(0.01)
        assert ans.conn.paused and not ans.conn.complete
        finish.set()
        got = b"".join([c async for c in ans])
        assert got == b"".join(pieces) and not ans.conn.paused and ans.conn.complete
        await ans.aclose()
        await t.aclose()


async def test_two_responses_in_one_read_never_reach_the_next_caller():
    async with raw_server(lambda n, _: ok(b"first") + ok(b"SMUGGLED") if n == 1 else ok(b"second %d" % n)
                          ) as (port, conns):
        t = H1Transport()
        assert await fetch(t, port) == (200, b"first")
        _, body = await fetch(t, port)
        assert body != b"SMUGGLED" and body.startswith(b"second")
        assert conns == [1, 2]
        await t.aclose()


async def test_idle_connections_expire_as_keep_alive_says():
    async with raw_server(lambda n, _: ok(b"x", b"keep-alive: timeout=1\r\n")) as (port, conns):
        t = H1Transport()
        await fetch(t, port)
        await fetch(t, port)  # within the server's idle timeout (less a second's margin): reused
        assert conns == [1, 1]
        await asyncio.sleep(0.05)
        for c in t._idle[(b"http", b"127.0.0.1", port)]:
            c.idle_since -= 1.0  # a second later (moving the clock, not sleeping)
        await fetch(t, port)
        assert conns == [1, 1, 2]
        await t.aclose()


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 abc OK\r\ncontent-length: 0\r\n\r\n",
    b"HTTTP/1.1 200 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nbad header line\r\ncontent-length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 7\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
])
async def test_malformed_answers_are_protocol_errors(raw: bytes):
    async with raw_server(lambda n, _: raw) as (port, _):
        t = H1Transport()
        with pytest.raises(httpx.RemoteProtocolError):
            await fetch(t, port)
        await t.aclose()


async def test_oversized_head_is_refused():
    lines = (b"x-big: " + b"a" * 1000 + b"\r\n") * (MAX_HEAD // 1000 + 5)
    async with raw_server(lambda n, _: b"HTTP/1.1 200 OK\r\n" + lines + b"content-length: 0\r\n\r\n"
                          ) as (port, _):
        t = H1Transport()
        with pytest.raises(httpx.RemoteProtocolError, match="head exceeds"):
            await fetch(t, port)
        await t.aclose()


async def test_early_eof_mid_body_is_a_read_error():
    async with raw_server(lambda n, _: b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this",
                          close_after=True) as (port, _):
        t = H1Transport()
        with pytest.raises(httpx.ReadError):
            await fetch(t, port)
        await t.aclose()


async def test_closed_without_an_answer_on_a_new_connection_is_a_read_error():
    async with raw_server(lambda n, _: None) as (port, conns):
        t = H1Transport()
        with pytest.raises(httpx.ReadError):
            await fetch(t, port)
        assert conns == [1]  # a new connection is not retried: the request may have run
        await t.aclose()


async def test_interim_answers_are_skipped():
    early = b"HTTP/1.1 103 Early Hints\r\nlink: </x>; rel=preload\r\n\r\n"
    async with raw_server(lambda n, _: early + ok(b"real %d" % n, b"x-final: 1\r\n")) as (port, conns):
        t = H1Transport()
        ans = await t.open((b"http", b"127.0.0.1", port), REQUEST,
                           deadline=asyncio.get_running_loop().time() + 5)
        assert ans.status == 200 and ans.header("x-final") == "1" and ans.header("link") is None
        assert await ans.read() == b"real 1"
        await ans.aclose()
        assert await fetch(t, port) == (200, b"real 2")
        assert conns == [1, 1]  # still in step: reused
        await t.aclose()


async def test_an_unasked_protocol_switch_is_a_protocol_error():
    async with raw_server(lambda n, _: b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n"
                                       b"connection: upgrade\r\n\r\n") as (port, _):
        t = H1Transport()
        with pytest.raises(httpx.RemoteProtocolError, match="switched protocols"):
            await fetch(t, port)
        await t.aclose()


async def test_a_reset_never_ends_a_close_delimited_body():
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\npart of it")
        await writer.drain()
        await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # RST, not FIN

    async with tcp_server(handle) as port:
        t = H1Transport()
        with pytest.raises(httpx.ReadError):
            await fetch(t, port)
        await t.aclose()


async def test_garbage_after_a_whole_answer_keeps_the_answer_and_drops_the_connection():
    async with raw_server(lambda n, _: ok(b"whole %d" % n) + (b"\x00garbage\r\n" if n == 1 else b"")
                          ) as (port, conns):
        t = H1Transport()
        assert await fetch(t, port) == (200, b"whole 1")
        assert await fetch(t, port) == (200, b"whole 2")
        assert conns == [1, 2]
        await t.aclose()


async def test_the_sweep_closes_expired_idle_connections():
    async with raw_server(lambda n, _: ok(b"x")) as (port, _):
        t = H1Transport()
        await fetch(t, port)
        assert t._sweeper is not None  # armed while connections idle in the pool
        (conn,) = t._idle[(b"http", b"127.0.0.1", port)]
        t._sweep()
        assert not conn.closed and t._sweeper is not None  # still fresh: kept, and re-armed
        conn.idle_since -= 31.0  # half a minute later (moving the clock, not sleeping)
        t._sweep()
        assert conn.closed and t._idle[(b"http", b"127.0.0.1", port)] == [] and t._sweeper is None
        await t.aclose()


@pytest.mark.parametrize(("name", "value"), [(b"x-a", b"1\r\nhost: evil"), (b"x-a", b"\n"),
                                             (b"x-a", b"nul\x00"), (b"x-a\r\nx-b", b"1"), (b"x:a", b"1"),
                                             (b"x\x00a", b"1"), (b"x-a\n", b"1")])
def test_header_lines_never_write_a_line_break(name: bytes, value: bytes):
    with pytest.raises(ValueError, match="CR, LF, NUL"):
        header_lines([(name, value)])
    assert header_lines([(b"x-a", b"fine \tvalue")]) == b"x-a: fine \tvalue\r\n"


async def test_a_server_that_closes_idle_connections_costs_no_failure():
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = 0
        while True:
            try:  # an idle timeout of 50 ms, then the server closes (a FIN while we hold it idle)
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 0.05 if n else 5)
                await reader.readexactly(2)
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                break
            n += 1
            writer.write(ok(b"served"))
            await writer.drain()
        writer.close()

    async with tcp_server(handle) as port:
        t = H1Transport()
        assert await fetch(t, port) == (200, b"served")
        await asyncio.sleep(0.2)  # the server has closed it by now
        assert await fetch(t, port) == (200, b"served")  # on a new connection, without an error
        assert await fetch(t, port) == (200, b"served")  # and that one is reused at once
        await t.aclose()


async def test_a_wait_for_a_connection_ends_at_the_deadline():
    """Every connection busy: the wait for one is bounded by the request's deadline (a
    PoolTimeout, which the backend answers as a 503 naming the deployment)."""
    async with raw_server(lambda n, _: ok(b"x")) as (port, conns):
        t = H1Transport(max_connections=1)
        loop = asyncio.get_running_loop()
        held = await t.open((b"http", b"127.0.0.1", port), REQUEST, deadline=loop.time() + 30)
        started = loop.time()
        with pytest.raises(httpx.PoolTimeout, match="max_connections"):
            await t.open((b"http", b"127.0.0.1", port), REQUEST, deadline=loop.time() + 0.2)
        assert loop.time() - started < 5
        await held.aclose()
        assert await fetch(t, port) == (200, b"x")  # the slot the timed-out wait never took is free
        assert await fetch(t, port) == (200, b"x")
        assert conns == [1, 1, 1]
        await t.aclose()


async def test_a_reset_pooled_connection_is_not_resent():
    """An RST before the first byte is the upstream's doing: retrying it is the router's (counted
    as an attempt), so the transport does not resend it too. (A FIN is the keep-alive race: see
    test_pooled_connection_closed_by_the_server_is_retried_once_on_a_new_one.)"""
    async with raw_server(lambda n, _: ok(b"x") if n == 1 else RESET) as (port, conns):
        t = H1Transport()
        assert await fetch(t, port) == (200, b"x")
        with pytest.raises(httpx.ReadError):
            await fetch(t, port)  # on the pooled connection
        assert conns == [1, 1]
        await t.aclose()


@asynccontextmanager
async def slow_server(delays: list[float]) -> AsyncIterator[int]:
    """One answer per request on a kept connection, the n-th after ``delays[n]`` seconds."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for delay in delays:
                await reader.readuntil(b"\r\n\r\n{}")
                await asyncio.sleep(delay)
                writer.write(ok(b"late" if delay else b"prompt"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async with tcp_server(handle) as port:  # (a handler still sleeping on a late answer holds one)
        yield port


async def answer_by(t: H1Transport, port: int, within: float | None) -> bytes:
    deadline = asyncio.get_running_loop().time() + within if within is not None else None
    ans = await t.open((b"http", b"127.0.0.1", port), REQUEST, deadline=deadline)
    try:
        return await ans.read()
    finally:
        await ans.aclose()


async def test_a_kept_connection_s_next_request_has_its_own_deadline():
    """A connection's watchdog outlives the request that armed it: the next request on it is
    bounded by its own deadline, later or earlier than the first's."""
    async with slow_server([0, 0.6, 0, 0.6, 0, 3]) as port:
        t = H1Transport()
        assert await answer_by(t, port, 0.3) == b"prompt"
        # The first deadline passes while this answer is on its way: the request stands.
        assert await answer_by(t, port, 5) == b"late"
        assert await answer_by(t, port, 0.3) == b"prompt"
        assert await answer_by(t, port, None) == b"late"  # and one with no deadline at all
        assert await answer_by(t, port, 30) == b"prompt"
        loop = asyncio.get_running_loop()
        started = loop.time()
        # An earlier deadline than the one armed: it holds, not the 30 s.
        with pytest.raises(httpx.ReadTimeout, match="deadline"):
            await asyncio.wait_for(answer_by(t, port, 0.3), 2)
        assert loop.time() - started < 2
        await t.aclose()


async def test_an_idle_connection_outlives_its_last_request_s_deadline():
    async with raw_server(lambda n, _: ok(b"x")) as (port, conns):
        t = H1Transport()
        assert await answer_by(t, port, 0.2) == b"x"
        await asyncio.sleep(0.4)  # its watchdog fires on an idle connection: nothing to bound
        assert await answer_by(t, port, 5) == b"x"
        assert conns == [1, 1]
        await t.aclose()


async def test_a_request_sent_while_another_waits_goes_out_at_the_turn_s_end():
    """Alone, a request is written at once; while another waits for its answer, it joins the
    turn's outbox (core.outbox) and goes out when the turn ends. Both get their own answers."""
    async with slow_server([0, 0.3]) as port:  # each connection: one prompt answer, then a late one
        t = H1Transport()
        # Two kept connections, each with its prompt answer given.
        assert await asyncio.gather(answer_by(t, port, 5), answer_by(t, port, 5)) == [b"prompt"] * 2
        first = asyncio.create_task(answer_by(t, port, 5))
        await asyncio.sleep(0)
        assert t.waiting == 1 and not t._outbox.writes  # alone: written at once
        second = asyncio.create_task(answer_by(t, port, 5))
        await asyncio.sleep(0)
        assert t.waiting == 2 and len(t._outbox.writes) == 1  # behind a waiting one: the turn's end
        await asyncio.sleep(0)
        assert not t._outbox.writes
        assert await asyncio.gather(first, second) == [b"late", b"late"]
        assert t.waiting == 0
        await t.aclose()


async def test_pool_slots_go_to_waiters_first_come_first_served_and_none_is_lost():
    """A released slot passes to the longest waiter; one whose wait timed out takes none; one
    handed a slot as its wait was cancelled passes it on; a slot nobody waits for is free again."""
    slots = _Slots(1)
    assert slots.take() and not slots.take()
    order: list[str] = []

    async def waiter(name: str, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                await slots.wait()
            order.append(name)
        except TimeoutError:
            order.append(f"{name} timed out")

    gone = asyncio.create_task(waiter("gone", 0.01))
    first = asyncio.create_task(waiter("first", 5))
    second = asyncio.create_task(waiter("second", 5))
    await asyncio.sleep(0.05)
    assert order == ["gone timed out"] and len(slots.waiters) == 2
    slots.release()  # to "first"
    await first
    assert order[-1] == "first" and not slots.take()  # "second" still waits: no free slot
    slots.release()  # to "second"
    second.cancel()  # cancelled after it was handed the slot: passed on (to nobody: free)
    await asyncio.gather(second, return_exceptions=True)
    await gone
    assert slots.free == 1 and not slots.waiters and slots.take()
