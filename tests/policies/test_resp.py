"""The pipelined RESP connection (switchyard.policies.resp) against a server on loopback that
answers late or never: its watchdog, one timer per connection, bounds every command."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from switchyard.policies.resp import ReplyError, RespConnection, bulk, encode


@asynccontextmanager
async def silent_server(replies: bytes = b"") -> AsyncIterator[int]:
    """A server on loopback (its port) that answers ``replies`` once, to the first command, then
    nothing more; its connections are closed when the test leaves it."""
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.read(1)
        writer.write(replies)
        await writer.drain()
        await reader.read()  # until the client hangs up

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for w in writers:
            w.close()
        server.close()
        await server.wait_closed()


async def test_a_stalled_link_fails_its_oldest_command_by_timeout_and_the_rest_to_retry():
    async with silent_server() as port:
        c = await RespConnection.open("127.0.0.1", port, timeout=0.2)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        futs = [c.request(encode((b"GET", f"k{i}")), defer=i > 0) for i in range(3)]
        got = await asyncio.gather(*futs, return_exceptions=True)
        assert 0.15 <= loop.time() - t0 < 0.6
        assert type(got[0]) is TimeoutError
        assert all(type(e) is ConnectionError for e in got[1:])
        assert c.lost
        with pytest.raises(ConnectionError):
            c.request(encode((b"GET", b"k")))


async def test_answered_commands_leave_the_watchdog_for_the_next_one():
    # The first command is answered at once; the second, sent later, gets its own full deadline.
    async with silent_server(b"$1\r\nv\r\n") as port:
        c = await RespConnection.open("127.0.0.1", port, timeout=0.3)
        assert await c.request(encode((b"GET", b"a"))) == b"v"
        await asyncio.sleep(0.2)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(TimeoutError):
            await c.request(encode((b"GET", b"b")))
        assert loop.time() - t0 >= 0.25  # not the first command's deadline


async def test_without_a_timeout_nothing_is_armed():
    async with silent_server() as port:
        c = await RespConnection.open("127.0.0.1", port)
        fut = c.request(encode((b"GET", b"a")))
        await asyncio.sleep(0.3)
        assert not fut.done() and c._watch is None
        c.close()
        with pytest.raises(ConnectionError):
            await fut



class _Wire:
    """A transport that takes what the connection writes (the replies are fed by the test)."""

    def __init__(self) -> None:
        self.closing = False
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def abort(self) -> None:
        self.closing = True


def _connection() -> RespConnection:
    c = RespConnection()
    c.connection_made(_Wire())  # type: ignore[arg-type]
    return c


async def test_a_command_goes_out_at_once_on_an_idle_link_and_with_its_turn_s_others_on_a_busy_one():
    """Written now when no reply is pending (no wait at low load); behind a pending reply, with
    the other commands of the loop's turn in one write (Redis answers in order, so waiting for
    the turn's end delays no reply); a deferred command waits for the turn even on an idle link."""
    c = _connection()
    wire = c.transport
    assert isinstance(wire, _Wire)
    a, b, d = (encode((b"GET", k)) for k in (b"a", b"b", b"d"))
    fa = c.request(a)
    assert wire.writes == [a]  # idle: at once
    fb, fd = c.request(b), c.request(d)
    assert wire.writes == [a]  # a reply is pending: with the turn's others
    await asyncio.sleep(0)
    assert wire.writes == [a, b + d]
    c.data_received(b":1\r\n:2\r\n:3\r\n")
    assert [await f for f in (fa, fb, fd)] == [1, 2, 3]
    fe = c.request(a)
    assert wire.writes[-1] == a  # idle again: at once
    c.data_received(b":4\r\n")
    assert await fe == 4
    ff = c.request(b, defer=True)
    assert len(wire.writes) == 3  # deferred: the turn's end, even on an idle link
    await asyncio.sleep(0)
    assert wire.writes[-1] == b
    c.data_received(b":5\r\n")
    assert await ff == 5


async def test_replies_in_any_pieces_reach_their_commands_in_order():
    """Every reply type the hot path meets, arriving whole, byte by byte and across replies, goes
    to its own command; an error reply fails only its own; a reply nobody asked for, or bytes that
    are no RESP, fail the link."""
    replies = (b"*8\r\n:1\r\n:1732812345678\r\n:-1\r\n:100\r\n:0\r\n$3\r\nrpm\r\n$-1\r\n*0\r\n"
               b"+OK\r\n-NOSCRIPT No matching script\r\n$4\r\nv\r\nx\r\n:42\r\n*-1\r\n")
    want = [[1, 1732812345678, -1, 100, 0, b"rpm", None, []], b"OK", "NOSCRIPT", b"v\r\nx", 42, None]
    for piece in (len(replies), 1, 7):
        c = _connection()
        futs = [c.request(encode((b"GET", f"k{i}"))) for i in range(len(want))]
        for i in range(0, len(replies), piece):
            c.data_received(replies[i:i + piece])
        got = await asyncio.gather(*futs, return_exceptions=True)
        assert [e.code if isinstance(e, ReplyError) else e for e in got] == want
        assert not c.lost
        c.data_received(b":1\r\n")  # nobody asked
        assert c.lost
    c = _connection()
    fut = c.request(encode((b"GET", b"k")))
    c.data_received(b"?what\r\n")
    with pytest.raises(ConnectionError, match="bad reply"):
        await fut
    assert c.lost


@pytest.mark.parametrize("value", [0, -7, 12345, "", "é", "x" * 255, "y" * 256, b"\x00\r\n" * 100])
def test_a_bulk_string_states_its_length_in_bytes(value: object) -> None:
    raw = value if isinstance(value, bytes) else str(value).encode()
    assert bulk(value) == b"$" + str(len(raw)).encode() + b"\r\n" + raw + b"\r\n"
    assert encode(("SET", "k", value)) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n" + bulk(value)
