"""The gateway's own HTTP/1.1 protocol (``switchyard.http.protocol``), spoken to byte by byte:
pipelining, 100-continue, HTTP/1.0, HEAD, bodies in pieces, an idle close without a word, and a
malformed request answered in the gateway's error shape; an app that fails gets a 500."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from switchyard.core.settings import ServerConfig
from switchyard.http.asgi import encode_headers, head_lines
from switchyard.http.protocol import Http11, ServeConfig
from switchyard.http.types import ANSWER, ASGIApp
from tests.conftest import free_port
from tests.gateway.conftest import KEY
from tests.http.test_server import closed_by_server, guarded


async def exchange(port: int, raw: bytes, within: float = 5) -> bytes:
    """Everything the server answers to ``raw`` until it closes the connection."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(raw)
    await w.drain()
    try:
        return await closed_by_server(r, within)
    finally:
        w.close()


def answers(data: bytes) -> list[tuple[bytes, bytes]]:
    """(head, body) of each content-length answer in ``data``, in order."""
    out = []
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        out.append((head, data[:length]))
        data = data[length:]
    return out


def post(path: str, body: bytes, *extra: bytes) -> bytes:
    lines = [b"POST %s HTTP/1.1" % path.encode(), b"host: x", b"authorization: Bearer " + KEY.encode(),
             b"content-type: application/json", b"content-length: %d" % len(body), *extra]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def test_pipelined_requests_are_answered_in_order():
    async with guarded() as port:
        bad = json.dumps({"model": "v/m", "messages": "nope"}).encode()
        raw = (b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n" + post("/v1/chat/completions", bad)
               + b"GET /nowhere HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        got = answers(await exchange(port, raw))
        assert [h.split(b"\r\n")[0] for h, _ in got] == [
            b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request", b"HTTP/1.1 404 Not Found"]
        assert json.loads(got[1][1])["error"]["param"] == "messages"
        assert b"connection: close" in got[2][0].lower()


async def test_expect_100_continue_then_a_body_in_pieces():
    async with guarded() as port:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        body = json.dumps({"model": "v/m", "messages": "nope"}).encode()
        w.write(post("/v1/chat/completions", b"", b"expect: 100-continue").replace(
            b"content-length: 0", b"content-length: %d" % len(body)))
        await w.drain()
        assert await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
        for i in range(0, len(body), 7):  # the body trickles in, 7 bytes a write
            w.write(body[i:i + 7])
            await w.drain()
            await asyncio.sleep(0.01)
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 400")
        w.close()


async def test_http_1_0_is_answered_and_closed():
    async with guarded() as port:
        got = answers(await exchange(port, b"GET /health HTTP/1.0\r\n\r\n"))
        assert got[0][0].startswith(b"HTTP/1.1 200") and b"connection: close" in got[0][0].lower()


async def test_head_answers_a_head_without_a_body():
    async with guarded(idle_timeout=0.5) as port:
        data = await exchange(port, b"HEAD /health HTTP/1.1\r\nhost: x\r\n\r\n")
        head, _, rest = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 ") and rest == b""


async def test_an_idle_connection_is_closed_without_a_408():
    async with guarded(idle_timeout=0.5, header_timeout=30) as port:
        got = answers(await exchange(port, b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"))
        assert len(got) == 1 and got[0][0].startswith(b"HTTP/1.1 200")  # and nothing more


async def test_a_request_the_parser_refuses_gets_the_gateway_error_shape():
    async with guarded() as port:
        data = await exchange(port, b"POST /v1/chat/completions HTTP/1.1\r\nbad header\r\n\r\n")
        head, body = answers(data)[0]
        assert head.startswith(b"HTTP/1.1 400")
        assert json.loads(body)["error"]["param"] == "headers"


async def test_a_body_larger_than_the_read_buffer_is_read_whole():
    async with guarded() as port:
        # 300 KB in 50 KB writes: many reads, handed to the app as they come (reading pauses
        # whenever 64 KB lie unread).
        body = json.dumps({"model": "v/m", "messages": "nope", "metadata": {"pad": "x" * 300_000}}).encode()
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(post("/v1/chat/completions", b"", b"connection: close").replace(
            b"content-length: 0", b"content-length: %d" % len(body)))
        for i in range(0, len(body), 50_000):
            w.write(body[i:i + 50_000])
            await w.drain()
        head, answer = answers(await closed_by_server(r, 10))[0]
        w.close()
        assert head.startswith(b"HTTP/1.1 400")
        assert json.loads(answer)["error"]["param"] == "messages"


@contextlib.asynccontextmanager
async def serving(app: ASGIApp) -> AsyncIterator[tuple[int, uvicorn.Server]]:
    """``app`` alone behind the gateway's protocol: its port and server."""
    port = free_port()
    server = uvicorn.Server(ServeConfig(app, ServerConfig(), host="127.0.0.1", port=port,
                                       loop="asyncio", lifespan="off", log_config=None))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield port, server
    finally:
        server.should_exit = True
        await task


async def test_an_app_that_fails_gets_a_500_and_the_log_line_names_no_path(caplog):
    async def failing(scope, receive, send):
        if scope["type"] == "http":
            raise RuntimeError("boom")

    async with serving(failing) as (port, _):
        with caplog.at_level(logging.ERROR, logger="switchyard"):
            data = await exchange(port, b"GET /sk-secret-in-a-path HTTP/1.1\r\nhost: x\r\n\r\n")
        head, body = answers(data)[0]
        assert head.startswith(b"HTTP/1.1 500") and body == b"Internal Server Error"
        lines = [r.getMessage() for r in caplog.records if r.name == "switchyard"]
        assert lines == ["the app failed on a request"]
        assert not any("sk-secret" in r.getMessage() for r in caplog.records)


async def test_a_keep_alive_connection_holds_no_hook_of_an_answered_request():
    """A request's disconnect hook leaves its connection once the app returns, whether the app
    set it or not (Litestar's routes never do): else a keep-alive client (a metrics scraper)
    would grow the list by one a request, and every request would walk it."""
    async def plain(scope, receive, send):
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"ok"})

    async with serving(plain) as (port, server):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _ in range(50):
                w.write(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
                assert (await asyncio.wait_for(r.readuntil(b"\r\n\r\nok"), 5)).startswith(b"HTTP/1.1 200")
            [conn] = server.server_state.connections
            assert len(conn.hooks) <= 1  # (the last request's, until the next one begins)
            assert server.config.unanswered == 0  # each answer counted off once
        finally:
            w.close()


def test_answer_headers_never_carry_a_line_break_or_nul() -> None:
    """A header value the gateway passes on (an upstream's, a caller's id) cannot end the header
    or begin another: CR, LF and NUL become spaces, a tab stays, what latin-1 lacks becomes ?."""
    plain = {"x-request-id": "abc", "x-switchyard-model": "mock/gpt"}
    assert encode_headers(plain, "text/plain") == [
        (b"content-type", b"text/plain"), (b"x-request-id", b"abc"), (b"x-switchyard-model", b"mock/gpt")]
    odd = {"x-a": "one\r\nset-cookie: x=1", "x-b": "n\0l", "x-c": "t\tab", "x-d": "caf\u00e9 \u20ac"}
    assert encode_headers(odd, "text/plain")[1:] == [
        (b"x-a", b"one  set-cookie: x=1"), (b"x-b", b"n l"), (b"x-c", b"t\tab"), (b"x-d", b"caf\xe9 ?")]


def test_header_lines_for_a_whole_answer_leave_the_careful_cases_to_the_asgi_way() -> None:
    """``head_lines`` (for the answer extension) writes plain headers as they are, the content
    type first and the request id last; a value that holds a control character or what latin-1
    lacks, a name that is no lower-case token, or a framing header gives None: ``encode_headers``
    and the server's reading of the head take those."""
    assert head_lines({"x-a": "1", "retry-after": "2"}, "application/json", "rid") == (
        b"content-type: application/json\r\nx-a: 1\r\nretry-after: 2\r\nx-request-id: rid\r\n")
    assert head_lines({}, "text/plain", "rid") == b"content-type: text/plain\r\nx-request-id: rid\r\n"
    assert head_lines({"x-a": "caf\u00e9"}, "text/plain", "r") == (
        b"content-type: text/plain\r\nx-a: caf\xe9\r\nx-request-id: r\r\n")
    for careful in ({"x-a": "one\r\nset-cookie: x=1"}, {"x-a": "n\0l"}, {"x-a": "t\tab"}, {"x-a": "\u20ac"},
                    {"x a": "1"}, {"x-a:": "1"}, {"X-A": "1"}, {"connection": "close"},
                    {"content-length": "3"}, {"x-a": "1", "transfer-encoding": "chunked"}):
        assert head_lines(careful, "text/plain", "r") is None, careful


def _connected(app: ASGIApp, wire: asyncio.Transport) -> tuple[Http11, ServeConfig]:
    """A connection of the gateway's protocol serving ``app`` over ``wire`` (no socket)."""
    config = ServeConfig(app, ServerConfig(), lifespan="off", log_config=None)
    conn = Http11(config, ServerState(), {})
    conn.connection_made(wire)
    return conn, config


class _Wire(asyncio.Transport):
    """A transport that records what the server writes to it."""

    def __init__(self) -> None:
        super().__init__()
        self.out: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.out.append(bytes(data))

    def writelines(self, parts: Any) -> None:
        self.out.append(b"".join(parts))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def test_an_answer_waits_for_the_turn_s_end_only_while_other_requests_are_in_flight():
    """Alone, an answer is written as the app sends it; while another request's answer is still
    to come it goes out once the loop's turn ends, with the turn's others (core.outbox), whole;
    each answer is counted off once."""
    written_when_sent: list[int] = []
    wire = _Wire()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        written_when_sent.append(len(wire.out))

    conn, config = _connected(app, wire)
    request = b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n"
    conn.data_received(request)
    await asyncio.sleep(0.01)
    assert written_when_sent == [1] and wire.out[0].endswith(b"\r\n\r\nok")
    assert config.unanswered == 0
    config.unanswered += 1  # another request whose answer is still to come
    try:
        conn.data_received(request)
        await asyncio.sleep(0.01)
        assert written_when_sent == [1, 1]  # not yet when the app's send returned
        assert len(wire.out) == 2 and wire.out[1].startswith(b"HTTP/1.1 200") and wire.out[1].endswith(b"ok")
        assert not conn.deferred and config.unanswered == 1
    finally:
        conn.connection_lost(None)


async def test_a_waiting_answer_goes_out_before_the_error_for_a_bad_request_behind_it():
    """An answer still in the outbox when the parser refuses the next request on its connection
    (which arrived before the turn ended) is written first, then the 400, then the connection
    closes."""
    wire = _Wire()
    conn: Http11

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        conn.data_received(b"GET /next HTTP/1.1\r\nbad header\r\n\r\n")  # before the turn's end

    conn, config = _connected(app, wire)
    config.unanswered += 1  # another request whose answer is still to come
    try:
        conn.data_received(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
        await asyncio.sleep(0.01)
        assert [w.split(b"\r\n")[0] for w in wire.out] == [b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request"]
        assert wire.out[0].endswith(b"ok") and wire.closed
    finally:
        conn.connection_lost(None)


async def test_a_whole_answer_in_one_call_is_one_write_framed_by_the_server():
    """The ``ANSWER`` extension: the server adds the status line, the length and, for a client
    that does not keep the connection, ``connection: close``; a HEAD gets the head alone. The
    answer is counted off once, and a second answer to the same request is refused."""
    wire = _Wire()
    refused: list[str] = []

    async def app(scope, receive, send):
        answer = scope["extensions"][ANSWER]
        await answer.whole(201, b"x-a: 1\r\n", b"made")
        try:
            await answer.whole(200, b"", b"again")
        except RuntimeError as e:
            refused.append(str(e))

    conn, config = _connected(app, wire)
    try:
        conn.data_received(b"POST /v1/x HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        await asyncio.sleep(0.01)
        assert wire.out == [b"HTTP/1.1 201 Created\r\nx-a: 1\r\ncontent-length: 4\r\n\r\nmade"]
        assert config.unanswered == 0 and not wire.closed and len(refused) == 1
        conn.data_received(b"HEAD /v1/x HTTP/1.1\r\nhost: x\r\n\r\n")
        await asyncio.sleep(0.01)
        assert wire.out[1] == b"HTTP/1.1 201 Created\r\nx-a: 1\r\ncontent-length: 4\r\n\r\n"
        conn.data_received(b"GET /v1/x HTTP/1.0\r\n\r\n")
        await asyncio.sleep(0.01)
        assert wire.out[2] == (b"HTTP/1.1 201 Created\r\nx-a: 1\r\ncontent-length: 4\r\n"
                               b"connection: close\r\n\r\nmade")
        assert wire.closed and config.unanswered == 0 and len(refused) == 3
    finally:
        conn.connection_lost(None)


async def test_a_streamed_answer_without_messages_is_chunked_and_its_head_goes_with_its_first_part():
    """``begin`` holds the head for the first ``part`` (one write); the last part ends the chunked
    body; a part before any head is refused."""
    wire = _Wire()
    refused: list[str] = []

    async def app(scope, receive, send):
        answer = scope["extensions"][ANSWER]
        if scope["path"] == "/early":
            try:
                await answer.part(b"x", True)
            except RuntimeError as e:
                refused.append(str(e))
            await answer.whole(200, b"", b"")
            return
        await answer.begin(200, b"content-type: text/event-stream\r\n")
        await answer.part(b"data: 1\n\n", True)
        await answer.part(b"data: 2\n\n", False)

    conn, config = _connected(app, wire)
    try:
        conn.data_received(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
        await asyncio.sleep(0.01)
        assert wire.out == [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                            b"transfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n",
                            b"9\r\ndata: 2\n\n\r\n0\r\n\r\n"]
        assert config.unanswered == 0 and not wire.closed
        conn.data_received(b"GET /early HTTP/1.1\r\nhost: x\r\n\r\n")
        await asyncio.sleep(0.01)
        assert len(refused) == 1 and wire.out[2] == b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
    finally:
        conn.connection_lost(None)


async def test_a_malformed_request_pipelined_behind_others_is_refused_after_their_answers():
    """A malformed request that arrives in one read with good ones still being answered: each
    good one gets its answer, in order, then the 400, then the connection closes (it used to
    close at once, and the good answers were lost)."""
    async def slow(scope, receive, send):
        if scope["type"] == "http":
            await asyncio.sleep(0.05)  # the answer is under way when the bad request is read
            body = scope["path"].encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", b"%d" % len(body))]})
            await send({"type": "http.response.body", "body": body})

    async with serving(slow) as (port, _):
        raw = (b"GET /one HTTP/1.1\r\nhost: x\r\n\r\nGET /two HTTP/1.1\r\nhost: x\r\n\r\n"
               b"GET /v1/chat/completions HTTP/1.1\r\nbad header\r\n\r\n")
        got = answers(await exchange(port, raw))
        assert [head.split(b"\r\n")[0] for head, _ in got] == [
            b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request"]
        assert [body for _, body in got[:2]] == [b"/one", b"/two"]
        assert json.loads(got[2][1])["error"]["param"] == "headers"


async def test_a_pipelined_request_whose_body_breaks_before_its_turn_is_refused_in_its_turn():
    """A queued request whose chunked body turns out malformed is dropped from the queue (its app
    never runs) and refused with a 400 after the answer before it; the connection then closes."""
    ran: list[str] = []

    async def slow(scope, receive, send):
        if scope["type"] == "http":
            ran.append(scope["path"])
            await asyncio.sleep(0.05)
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"ok"})

    async with serving(slow) as (port, _):
        raw = (b"GET /one HTTP/1.1\r\nhost: x\r\n\r\n"
               b"POST /two HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nnot a chunk\r\n")
        got = answers(await exchange(port, raw))
        statuses = [head.split(b"\r\n")[0] for head, _ in got]
        assert statuses == [b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request"] and ran == ["/one"]
