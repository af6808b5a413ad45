"""The gateway's HTTP/1.1 server protocol: httptools parsing, ASGI 3 to the app, served under
uvicorn's ``Server`` (which keeps the listening sockets, the lifespan, signals, graceful stop and
the worker supervisor).

uvicorn's own httptools protocol costs about four times this one per request (measured with a
bare app: a timer armed and cancelled per request, an ``asyncio.Event`` and a cycle object per
request, a regular expression per response header, a URL parser call). This one keeps what the
gateway relies on, with one timer per connection:
- deadlines for a request's headers (slowloris), its body and an idle keep-alive connection;
- a client that takes no byte of its answer for ``write_timeout`` seconds loses the connection,
  so that what its request holds (an upstream connection, a concurrency slot) comes free;
- a ``Disconnect`` hook per request (extension ``switchyard.disconnect``): how a request hears
  that its client left without a task blocked in ``receive()``;
- pipelined requests answered in order; ``Expect: 100-continue``; HTTP/1.0 without keep-alive;
- a request the parser refuses answered in the gateway's error shape;
- beside ASGI, an answer written without its messages (the scope's ``switchyard.answer``
  extension, ``http.types.Answering``), which the gateway's hot endpoints use.
No WebSocket upgrade (the gateway serves none) and no ``limit_concurrency`` (the gateway's own
limits apply per key).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import http
import logging
import re
import struct
import sys
import termios
import urllib.parse
from collections import deque
from typing import Any

import httptools
import uvicorn
from uvicorn.server import ServerState

from switchyard.core.deadline import Deadline
from switchyard.core.errors import InvalidRequest
from switchyard.core.outbox import Outbox
from switchyard.core.settings import ServerConfig
from switchyard.dialects.errors import error_bytes
from switchyard.http.asgi import error_shape
from switchyard.http.disconnect import DISCONNECT, Disconnect
from switchyard.http.types import ANSWER, Answering, ASGIApp

log = logging.getLogger("switchyard")

_OUTQ: int | None = getattr(termios, "TIOCOUTQ", None) if sys.platform == "linux" else None  # SIOCOUTQ
_TIMEOUT_REPLY = b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_HIGH_WATER = 65536  # request body bytes buffered before reading pauses
_STATUS = {int(s): b"HTTP/1.1 %d %s\r\n" % (s, s.phrase.encode()) for s in http.HTTPStatus}

# What may not appear in a header name or value (CR and LF above all: no response splitting).
_BAD_NAME = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
_BAD_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
_METHODS = {m.encode(): m for m in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")}
_ASGI = {"version": "3.0", "spec_version": "2.3"}
_DISCONNECTED = {"type": "http.disconnect"}


def _status_line(status: int) -> bytes:
    return _STATUS.get(status) or b"HTTP/1.1 %d \r\n" % status


class ServeConfig(uvicorn.Config):
    """uvicorn's settings plus the gateway's limits on slow clients (read by ``Http11``)."""

    def __init__(self, app: Any, server: ServerConfig, **kw: Any) -> None:
        super().__init__(app, http=Http11, **kw)
        self.header_timeout = server.header_timeout
        # The completion endpoints answer a slow body with their own 408 (gateway.asgi); this
        # backstop closes a connection whose body stalls anywhere else a little later.
        self.body_timeout = server.body_timeout + 5.0
        self.write_timeout = server.write_timeout
        # Answers that end while others are still to come go out together (Exchange.send).
        self.outbox = Outbox()  # shared by the server's connections
        self.unanswered = 0  # requests begun whose answers are not complete


class Http11(asyncio.Protocol):
    """One client connection (uvicorn's ``Server`` makes one per accepted socket)."""

    def __init__(self, config: ServeConfig, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        if not config.loaded:
            config.load()
        self.app: ASGIApp = config.loaded_app
        self.loop = _loop or asyncio.get_event_loop()
        self.limits = config
        self.state = server_state
        self.app_state = app_state
        self.parser = httptools.HttpRequestParser(self)
        # A pipelined request right behind one that closes the connection is not an error.
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set on connection_made
        self.server: tuple[str, int] | None = None
        self.client: tuple[str, int] | None = None
        self.scheme = "http"
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.expect_continue = False
        self.reading: Exchange | None = None  # the request whose head or body is being parsed
        self.answering: Exchange | None = None  # the request whose app runs (answers go in order)
        self.queued: deque[Exchange] = deque()  # pipelined requests behind it
        self.refusal: bytes | None = None  # the 400 of a malformed request behind those, for its turn
        self.hooks: list[Disconnect] = []  # of requests that still listen for the client leaving
        self.write_paused = False
        self.deferred = False  # an answer of this connection's waits in the outbox
        self.drained: asyncio.Future[None] | None = None  # what a paused writer waits on
        self.read_paused = False
        # One timer for every deadline (headers, body, idle): per request a float written.
        self.deadline = Deadline(self.loop, self._expired)
        self.idle = False  # the deadline is an idle keep-alive connection's: closed without a word
        self.stall: asyncio.TimerHandle | None = None  # armed while writing is paused
        self.unsent = 0  # bytes buffered when it was armed

    # -- deadlines --------------------------------------------------------------------------

    def _until(self, seconds: float) -> None:
        self.deadline.set(self.loop.time() + seconds)

    def undefer(self) -> None:
        """Write this connection's answer waiting in the outbox now: before anything else is
        written to it, or it is closed."""
        if self.deferred:
            self.limits.outbox.flush()

    def close(self) -> None:
        self.undefer()
        self.transport.close()

    def defer(self, parts: tuple[bytes, ...]) -> None:
        """Write ``parts`` once the loop's turn ends, with the server's other deferred answers."""
        self.deferred = True
        self.limits.outbox.add(self.loop, self, parts)

    def write_deferred(self, parts: tuple[bytes, ...]) -> None:  # (core.outbox.Sink)
        self.deferred = False
        if not self.transport.is_closing():
            self.transport.writelines(parts)

    def _expired(self) -> None:
        if self.transport.is_closing():
            return
        self.undefer()
        answering = self.answering
        if not self.idle and (answering is None or answering.complete):  # a request too slow: say why
            self.transport.write(_TIMEOUT_REPLY)
        self.transport.close()

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport
        self.state.connections.add(self)  # type: ignore[arg-type]  # uvicorn types its own protocols
        self.server = transport.get_extra_info("sockname")
        self.client = transport.get_extra_info("peername")
        if transport.get_extra_info("sslcontext") is not None:
            self.scheme = "https"
        self._until(self.limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.connections.discard(self)
        self.deadline.cancel()
        if self.stall is not None:
            self.stall.cancel()
            self.stall = None
        for ex in (self.answering, self.reading):
            if ex is not None:
                ex.lost()
        # No cycles left for the collector (it runs seldom here: server._tune_gc).
        self.answering = self.reading = None
        self.parser = None  # type: ignore[assignment]  # (it holds this protocol's callbacks)
        self.queued.clear()
        self._resume_writers()
        for hook in self.hooks:
            hook.fire()
        self.hooks.clear()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # the request was parsed; what follows the upgrade is not HTTP (and unserved)
        except httptools.HttpParserError as e:
            self._refuse(str(e) or "Invalid HTTP request received.")

    def _refuse(self, why: str) -> None:
        """A request the parser refused (a bad header byte, a broken request line): answered in
        the gateway's error shape once the requests before it are, the connection closed."""
        self.undefer()
        log.debug("malformed HTTP request: %s", why)
        bad = self.reading
        if bad is not None and bad is self.answering and not bad.complete:
            self.transport.close()  # its own answer is under way: a second one would garble it
            return
        path = self.url.split(b"?", 1)[0].decode("latin-1")
        body = error_bytes(error_shape(path), InvalidRequest(
            "malformed HTTP request: Invalid HTTP request received.", param="headers"))[1]
        refusal = (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                   b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        if self.answering is not None and not self.answering.complete:
            # Pipelined behind answers still to come: the 400 follows them (``answered``). Reading
            # stops, and the refused head's deadline is off: the apps' own apply.
            if bad is not None and bad in self.queued:  # its body broke before its turn
                self.queued.remove(bad)
            self.reading = None
            self.refusal = refusal
            self.deadline.clear()
            self._pause_reading()
            return
        self.transport.write(refusal)
        self.transport.close()

    def pause_writing(self) -> None:
        self.write_paused = True
        if self.stall is None:
            self.unsent = self._pending()
            self.stall = self.loop.call_later(self.limits.write_timeout, self._stalled)

    def resume_writing(self) -> None:
        self._resume_writers()
        if self.stall is not None:
            self.stall.cancel()
            self.stall = None

    def _resume_writers(self) -> None:
        self.write_paused = False
        if self.drained is not None:
            if not self.drained.done():
                self.drained.set_result(None)
            self.drained = None

    def _pending(self) -> int:
        """Bytes of the answer the client has not taken: ours, and (on Linux) the kernel's send
        queue, so that a client reading slowly shows progress before the socket turns writable
        again (which waits for a good part of the kernel's send buffer to drain)."""
        n = self.transport.get_write_buffer_size()
        sock = self.transport.get_extra_info("socket")
        if _OUTQ is not None and sock is not None:
            with contextlib.suppress(OSError, ValueError):
                n += struct.unpack("i", fcntl.ioctl(sock.fileno(), _OUTQ, b"\0\0\0\0"))[0]
        return n

    def _stalled(self) -> None:
        self.stall = None
        left = self._pending()
        if left < self.unsent:  # a slow reader, not a stalled one: another period
            self.unsent = left
            self.stall = self.loop.call_later(self.limits.write_timeout, self._stalled)
            return
        self.transport.abort()  # (close() would wait for the unread bytes to leave: forever)

    async def drain(self) -> None:
        if self.drained is None:
            self.drained = self.loop.create_future()
        await self.drained

    def shutdown(self) -> None:
        """uvicorn's ``Server`` asks every connection to stop: at once when idle, else after the
        answer under way."""
        if self.answering is None or self.answering.complete:
            self.close()
        else:
            self.answering.keep_alive = False

    # -- httptools callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.expect_continue = False
        self.idle = False
        self._until(self.limits.header_timeout)

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._until(self.limits.body_timeout)
        parser = self.parser
        raw = parser.get_method()
        version = parser.get_http_version()
        url = self.url
        if url[:1] == b"/" and b"#" not in url:
            raw_path, _, query = url.partition(b"?")
        else:  # absolute form (a proxy's), or a fragment
            parsed = httptools.parse_url(url)
            raw_path, query = parsed.path or b"/", parsed.query or b""
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = urllib.parse.unquote(path)
        hook = Disconnect()
        self.hooks = [h for h in self.hooks if not h.done]  # (pipelined ones keep theirs)
        self.hooks.append(hook)
        extensions: dict[str, Any] = {DISCONNECT: hook}
        scope = {
            "type": "http", "asgi": _ASGI, "http_version": version, "server": self.server,
            "client": self.client, "scheme": self.scheme, "root_path": "",
            "method": _METHODS.get(raw) or raw.decode("ascii"), "path": path, "raw_path": raw_path,
            "query_string": query, "headers": self.headers, "state": self.app_state.copy(),
            "extensions": extensions,
        }
        # (an Upgrade is not served: the connection closes after the answer)
        keep_alive = version != "1.0" and parser.should_keep_alive() and not parser.should_upgrade()
        ex = self.reading = Exchange(self, scope, hook, self.expect_continue, keep_alive)
        extensions[ANSWER] = ex
        if self.answering is None or self.answering.complete:
            self._start(ex)
        else:  # pipelined: answered once the one before it is
            self._pause_reading()
            self.queued.append(ex)

    def on_body(self, body: bytes) -> None:
        ex = self.reading
        if ex is None or ex.complete:
            return
        ex.body.append(body)
        ex.buffered += len(body)
        if ex.buffered > _HIGH_WATER:
            self._pause_reading()
        ex.wake()

    def on_message_complete(self) -> None:
        self.deadline.clear()  # the app has the request now: its own deadlines apply
        ex, self.reading = self.reading, None
        if ex is None or ex.complete:
            return
        ex.more_body = False
        ex.wake()

    # -- requests ---------------------------------------------------------------------------

    def _start(self, ex: Exchange) -> None:
        self.answering = ex
        self.limits.unanswered += 1  # (until its answer is complete, or its app returns)
        task = ex.hook.task = self.loop.create_task(ex.run(self.app))
        tasks = self.state.tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def _pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()

    def answered(self, ex: Exchange) -> None:
        """``ex``'s answer is complete: the next pipelined request's turn, or an idle deadline."""
        self.state.total_requests += 1
        if not ex.keep_alive:
            self.close()
            return
        if self.transport.is_closing():
            return
        if self.refusal is not None:  # a malformed request behind: its 400 once its turn comes
            if self.queued:
                self._start(self.queued.popleft())
            else:
                self.undefer()  # (the answer just ended may wait in the outbox: it goes first)
                self.transport.write(self.refusal)
                self.transport.close()
            return
        self.resume_reading()
        if self.queued:
            self._start(self.queued.popleft())
        elif self.reading is None:
            self.idle = True
            self._until(self.limits.timeout_keep_alive)


class Exchange:
    """One request and its answer: the ASGI ``receive`` and ``send`` of its app."""

    __slots__ = ("bodiless", "body", "buffered", "chunked", "complete", "conn", "continue_", "delivered",
                 "disconnected", "head", "hook", "keep_alive", "left", "more_body", "scope", "started",
                 "waiter")

    def __init__(self, conn: Http11, scope: dict[str, Any], hook: Disconnect, expect_continue: bool,
                 keep_alive: bool) -> None:
        self.conn = conn
        # Until it runs: its extensions hold this exchange, and a cycle left behind would make each
        # request's objects wait for the garbage collector.
        self.scope: dict[str, Any] | None = scope
        self.hook = hook  # (scope's DISCONNECT): done once the app returns, whether it set it or not
        self.bodiless = scope["method"] == "HEAD"  # an answer's head only, whatever the app sends
        self.continue_ = expect_continue  # a 100 Continue is owed at the first receive()
        self.keep_alive = keep_alive
        self.body: list[bytes] = []
        self.buffered = 0
        self.more_body = True
        self.delivered = False  # the body's last part was handed to the app
        self.waiter: asyncio.Future[None] | None = None  # a receive() waiting for body or an end
        self.disconnected = False
        self.started = False
        self.complete = False
        self.chunked = False
        self.left = 0  # bytes of a content-length answer still to send
        self.head = b""  # the answer's head, until its body's first part goes with it

    def wake(self) -> None:
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(None)

    def lost(self) -> None:
        if not self.complete:
            self.disconnected = True
        self.wake()

    async def run(self, app: ASGIApp) -> None:
        scope, self.scope = self.scope, None
        assert scope is not None  # (run once)
        try:
            await app(scope, self.receive, self.send)
        except asyncio.CancelledError:  # (the stopping server's grace ran out)
            self.conn.close()
            raise
        except Exception as e:
            # (no path in the line: it is what a caller typed, and may hold a secret)
            log.error("the app failed on a request", exc_info=e)
            if not self.started:
                await self._plain_500()
            else:
                self.conn.close()
        else:
            if not self.started and not self.disconnected:
                log.error("the app answered nothing to a request")
                await self._plain_500()
            elif not self.complete and not self.disconnected:
                log.error("the app left its answer to a request unfinished")
                self.conn.close()
        finally:
            # An app that never set the hook (Litestar's routes) must not leave it on the
            # connection's list: a keep-alive client's every request would add one.
            self.hook.done = True
            if not self.complete:  # (a complete answer was counted off as it ended)
                self.conn.limits.unanswered -= 1

    async def _plain_500(self) -> None:
        await self.send({"type": "http.response.start", "status": 500,
                         "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                     (b"content-length", b"21"), (b"connection", b"close")]})
        await self.send({"type": "http.response.body", "body": b"Internal Server Error"})

    async def receive(self) -> dict[str, Any]:
        conn = self.conn
        if self.continue_:
            self.continue_ = False
            if not conn.transport.is_closing() and not self.started:
                conn.transport.write(_CONTINUE)
        while True:
            if self.disconnected or self.complete:
                return _DISCONNECTED
            if not self.delivered and (self.body or not self.more_body):
                break
            conn.resume_reading()
            self.waiter = conn.loop.create_future()
            await self.waiter
        body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        self.body = []
        self.buffered = 0
        if not self.more_body:
            self.delivered = True
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def _gone(self) -> bool:
        """Wait while the client takes no more of its answer; True if it left (nothing to write).
        (Called only when either holds: ``conn.write_paused or disconnected``.)"""
        if self.conn.write_paused and not self.disconnected:
            await self.conn.drain()
        return self.disconnected

    async def send(self, message: Any) -> None:
        if (self.conn.write_paused or self.disconnected) and await self._gone():
            return
        if not self.started:
            if message["type"] != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', got {message['type']!r}")
            self._head(message["status"], message.get("headers", ()))
            return
        if message["type"] != "http.response.body":
            raise RuntimeError(f"unexpected ASGI message {message['type']!r} after the answer began")
        self._part(message.get("body", b""), message.get("more_body", False))

    # -- the ANSWER extension (http.types.Answering): an answer without ASGI's messages ----------

    async def whole(self, status: int, lines: bytes, body: bytes) -> None:
        if (self.conn.write_paused or self.disconnected) and await self._gone():
            return
        head = b"%s%scontent-length: %d\r\n%s\r\n" % (self._begins(status), lines, len(body), self._closing())
        self._end((head, b"") if self.bodiless else (head, body))

    async def begin(self, status: int, lines: bytes) -> None:
        if (self.conn.write_paused or self.disconnected) and await self._gone():
            return
        line = self._begins(status)
        self.chunked = not self.bodiless
        self._hold(b"%s%s%s%s\r\n" % (line, lines, b"transfer-encoding: chunked\r\n" if self.chunked else b"",
                                       self._closing()))

    async def part(self, data: bytes, more: bool) -> None:
        if (self.conn.write_paused or self.disconnected) and await self._gone():
            return
        if not self.started:
            raise RuntimeError("a part of an answer whose head was not sent")
        self._part(data, more)

    def _begins(self, status: int) -> bytes:
        """The answer starts: its status line. Refuses a second head, and a status whose answer
        has no body (the extension's answers are all framed by the server)."""
        if self.started or status in (204, 304) or status < 200:
            raise RuntimeError(f"an answer of status {status} cannot begin now")
        self.started = True
        self.continue_ = False
        return _status_line(status)

    def _closing(self) -> bytes:
        """The header line that says the connection ends with this answer, if it does."""
        return b"" if self.keep_alive else b"connection: close\r\n"

    def _part(self, body: bytes, more: bool) -> None:
        if self.complete:
            raise RuntimeError("a part after the answer's end")
        conn = self.conn
        if self.bodiless:
            data = b""
        elif self.chunked:
            if body:
                data = (b"%x\r\n%s\r\n" if more else b"%x\r\n%s\r\n0\r\n\r\n") % (len(body), body)
            else:
                data = b"" if more else b"0\r\n\r\n"
        else:
            if len(body) > self.left:
                raise RuntimeError("the answer's body is longer than its content-length")
            self.left -= len(body)
            data = body
        head, self.head = self.head, b""  # the head goes with the body's first part
        if more:
            if head:  # one system call
                conn.transport.writelines((head, data))
            elif data:
                conn.transport.write(data)
            return
        if self.left and not self.bodiless:
            raise RuntimeError("the answer's body is shorter than its content-length")
        self._end((head, data) if head else (data,) if data else ())

    def _end(self, parts: tuple[bytes, ...]) -> None:
        """The answer's last bytes: written now, or with the loop turn's others while another
        request's answer is still to come."""
        conn = self.conn
        if parts:
            if self.keep_alive and conn.limits.unanswered > 1:
                conn.defer(parts)
            else:  # one system call
                conn.transport.writelines(parts)
        self.complete = True
        conn.limits.unanswered -= 1
        self.wake()
        conn.answered(self)

    def _head(self, status: int, headers: Any) -> None:
        self.started = True
        self.continue_ = False
        lines = [_status_line(status)]
        length: int | None = None
        close = False
        names = []
        values = []
        for name, value in headers:
            names.append(name)
            values.append(value)
            name = name.lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                self.chunked = value.lower() == b"chunked"
            elif name == b"connection" and b"close" in value.lower():
                self.keep_alive = False
                close = True
            lines.append(b"%s: %s\r\n" % (name, value))
        if _BAD_NAME.search(b"".join(names)) or _BAD_VALUE.search(b"\t".join(values)):
            raise RuntimeError("a response header holds a character HTTP forbids there")
        if not self.keep_alive and not close:
            lines.append(b"connection: close\r\n")
        if length is not None and not self.chunked:
            self.left = length
        elif not self.bodiless and status not in (204, 304) and not self.chunked:
            self.chunked = True
            lines.append(b"transfer-encoding: chunked\r\n")
        lines.append(b"\r\n")
        self._hold(b"".join(lines))

    def _hold(self, head: bytes) -> None:
        """Keep the head for the body's first part (what follows at once, nearly always): one
        write, not two. An app that waits before its body still has its head sent this turn."""
        self.head = head
        self.conn.loop.call_soon(self._flush)

    def _flush(self) -> None:
        if self.head and not self.conn.transport.is_closing():
            head, self.head = self.head, b""
            self.conn.transport.write(head)


_ANSWERING: type[Answering] = Exchange  # (the type checker holds the extension's interface)
