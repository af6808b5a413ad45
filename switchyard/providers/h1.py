"""A lean HTTP/1.1 transport for httpx: asyncio protocol + httptools parser + keep-alive pool.

Why: at gateway rates the client decides throughput. httpx's own pool is quadratic in its size
(encode/httpcore#1035) and aiohttp's client costs a few hundred microseconds per request here;
this transport writes each request in one ``write`` and parses with httptools, as uvicorn does.
It plugs in under httpx (``httpx.AsyncBaseTransport``), so httpx stays the client interface and
respx or any other transport can stand in for it in tests.
"""

from __future__ import annotations

import asyncio
import collections
import re
import ssl
from collections.abc import Callable, Iterable

import httptools
import httpx

from switchyard.core.deadline import Deadline
from switchyard.core.outbox import Outbox

_HIGH_WATER = 64  # body chunks buffered before we stop reading from the socket
IDLE_TIMEOUT = 30.0  # seconds a pooled connection is trusted idle, unless Keep-Alive says less
MAX_HEAD = 64 * 1024  # bytes of status line and headers an answer may have


class _Slots:
    """The connections one origin may have at once: a count of free ones, and the requests
    waiting for one, first come first served. (``asyncio.Semaphore.locked`` walks its waiters
    with a generator at every call; a request here costs one comparison when a slot is free.)"""

    __slots__ = ("free", "waiters")

    def __init__(self, n: int) -> None:
        self.free = n
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def take(self) -> bool:
        """A free slot now, if one is and nobody waits before this caller."""
        if self.free and not self.waiters:
            self.free -= 1
            return True
        return False

    async def wait(self) -> None:
        """Until a slot passes to this caller (bound it with a timeout)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():  # handed one as it gave up: the next one's
                self.release()
            elif fut in self.waiters:
                self.waiters.remove(fut)
            raise

    def release(self) -> None:
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():  # (a cancelled wait is done)
                fut.set_result(None)  # the slot passes to it
                return
        self.free += 1


class _Conn(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: collections.deque[bytes] = collections.deque()  # the body as it arrived
        # httptools calls this for each piece of a body (each HTTP chunk of a stream): the deque's
        # own append, no Python call a piece; ``data_received`` looks at what a read added.
        self.on_body = self.chunks.append
        self.kept = 0  # pieces of this answer's body when it ended (what follows is no one's)
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        # Its loop, kept: asking asyncio for the running one costs a getpid() system call (3.11).
        self.loop = asyncio.get_running_loop()
        # The request's deadline; one timer across the requests of a kept connection.
        self.deadline = Deadline(self.loop, self.expire)
        self.busy = False  # a request is out and its answer not yet handed back
        self.poisoned = False  # bytes came that no request asked for: never reuse
        self.idle_since = 0.0  # loop time it went back to the pool
        self.idle_for = IDLE_TIMEOUT  # how long the server keeps it open (Keep-Alive: timeout=N)
        self.reused = False  # taken from the pool (it may have been closed by the server meanwhile)
        self.reset_by_peer = False  # the upstream reset it (RST), rather than closed it (FIN)
        self.slot: _Slots | None = None  # the pool slot this request holds
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_size = 0  # the headers' bytes, as the wire has them (name: value CRLF)
        self.head: asyncio.Future[None] = self.loop.create_future()
        self.chunks.clear()
        self.waiter: asyncio.Future[None] | None = None
        self.complete = False
        self.keep_alive = False
        self.error: BaseException | None = None
        self.paused = False
        self.received = 0  # bytes of this answer so far
        self.framed = False  # content-length or chunked: the body's end is in the message
        self.interim = False  # parsing a 1xx answer (103 Early Hints ...): skipped

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # asyncio gives a stream protocol a Transport

    def data_received(self, data: bytes) -> None:
        if not self.busy or self.complete:
            # Bytes nobody asked for: a response smuggled ahead, or one for a request we never
            # sent. The next caller on this connection would read them as its own answer.
            self.poisoned = True
            self.close()
            return
        self.received += len(data)
        chunks = self.chunks
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as e:
            if self.complete:  # garbage after a whole answer: the answer stands, the connection not
                self.poisoned = True
            else:
                self._fail(httpx.RemoteProtocolError(f"malformed HTTP response: {e}"))
            self.close()
        if chunks:
            if self.complete:  # a second answer in the same read (poisoned): its body is no one's
                while len(chunks) > self.kept:
                    chunks.pop()
            elif len(chunks) > _HIGH_WATER and self.transport is not None and not self.paused:
                self.paused = True
                self.transport.pause_reading()
            self._wake()
        if not self.head.done() and self.received > MAX_HEAD:  # still no end of the head in sight
            self._too_big()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reset_by_peer = isinstance(exc, ConnectionResetError)
        if self.complete:
            return
        if exc is None and self.head.done() and not self.framed and self.error is None:
            # No content-length, not chunked: the body was delimited by the close (RFC 9112 6.3);
            # a reset (exc) is no end of a body.
            self.complete = True
            self._wake()
            return
        self._fail(httpx.ReadError("connection closed by the upstream"))

    # -- httptools callbacks
    def on_message_begin(self) -> None:
        if self.complete:  # a second response in the same read as the first
            self.poisoned = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.complete:  # (a poisoned second response's are not ours)
            self.headers.append((name, value))
            self.head_size += len(name) + len(value) + 4

    def on_headers_complete(self) -> None:
        if self.complete:
            return
        if self.head_size > MAX_HEAD:
            self._too_big()
            return
        self.status = self.parser.get_status_code()
        if 100 <= self.status < 200:
            if self.status == 101:  # we never ask to switch protocols
                self._fail(httpx.RemoteProtocolError("the upstream switched protocols unasked (101)"))
                return
            # An interim answer (100 Continue, 103 Early Hints): the real one follows.
            self.interim = True
            self.headers = []
            self.head_size = 0
            return
        for name, value in self.headers:
            n = name.lower()
            if n in (b"content-length", b"transfer-encoding"):
                self.framed = True
            elif n == b"keep-alive":
                self.idle_for = min(self.idle_for, _keep_alive_timeout(value))
        if self.status in (204, 304):
            self.framed = True
        if not self.head.done():
            self.head.set_result(None)

    def on_message_complete(self) -> None:
        if self.complete:
            return
        if self.interim:
            self.interim = False
            return
        # llhttp answers should_keep_alive() only inside its callbacks; afterwards it is reset.
        self.keep_alive = self.parser.should_keep_alive()
        self.complete = True
        self.kept = len(self.chunks)
        self._wake()

    # -- helpers
    def _too_big(self) -> None:
        self._fail(httpx.RemoteProtocolError(f"the upstream's response head exceeds {MAX_HEAD} bytes"))
        self.close()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:  # the first cause is the one to report
            self.error = exc
        if not self.head.done():
            self.head.set_exception(exc)
            self.head.exception()  # mark retrieved: the caller may be gone already
        self._wake()

    def expire(self) -> None:
        """The request's deadline passed: fail whoever waits, drop the connection, and give its
        pool slot back now (whoever holds the answer may not close it for a while: a caller that
        does not read its stream). A whole answer's connection stays (idle, or read to its end)."""
        if not self.complete:
            self._fail(httpx.ReadTimeout("the upstream did not finish before the deadline"))
            self.close()
        self.free()

    def free(self) -> None:
        """Give the pool slot back (once)."""
        slot, self.slot = self.slot, None
        if slot is not None:
            slot.release()

    def drop(self) -> None:
        """Close it for good, its deadline too (a closed connection's deadline still frees its
        slot: ``expire``)."""
        self.deadline.cancel()
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def write_deferred(self, parts: tuple[bytes, ...]) -> None:  # (core.outbox.Sink)
        # Closed meanwhile: its connection_lost or watchdog fails the waiting request.
        if not self.closed and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(parts)

    @property
    def reusable(self) -> bool:
        return (self.complete and self.keep_alive and not self.closed and self.error is None
                and not self.poisoned)

    async def next_chunk(self) -> bytes | None:
        """The next body chunk, or None at the end of the body."""
        while True:
            if self.chunks:
                # Everything that has arrived, at once: httptools reports each HTTP chunk of a
                # chunked body separately, but the reader wants whole arrivals (see sse.py).
                chunks = self.chunks
                chunk = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                if self.paused and self.transport is not None:
                    self.paused = False
                    self.transport.resume_reading()
                return chunk
            if self.complete:
                return None
            if self.error is not None:
                raise self.error
            self.waiter = self.loop.create_future()
            await self.waiter


class Answer(httpx.AsyncByteStream):
    """An upstream's answer: status and headers arrived, the body streams. Closing it hands the
    connection back to the pool (or closes a half-read one)."""

    def __init__(self, conn: _Conn, done: Callable[[_Conn], None]) -> None:
        self.conn = conn
        self.done = done
        self.closed = False

    @property
    def status(self) -> int:
        return self.conn.status

    def header(self, name: str) -> str | None:
        key = name.lower().encode()
        for k, v in self.conn.headers:
            if k.lower() == key:
                return v.decode("latin-1")
        return None

    # Its own iterator, not an async generator: a reader that stops early (at a stream's end
    # event) leaves nothing for the event loop's finalizer hook to close.
    def __aiter__(self) -> Answer:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self.conn.next_chunk()
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def read(self) -> bytes:
        # A loop on the connection, not over ``self``: no async generator made per answer.
        next_chunk = self.conn.next_chunk
        parts = []
        while (chunk := await next_chunk()) is not None:
            parts.append(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            self.done(self.conn)


Origin = tuple[bytes, bytes, int]
_BREAKS = re.compile(rb"[\x00\r\n]")
_BAD_NAME = re.compile(rb"[\x00\r\n:]")  # a name ends at its colon


def header_lines(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Header lines for the wire. Whatever checked them before (callers' headers are checked, with
    a 400, when the request is parsed), nothing that could end a line or the head is written."""
    out = []
    for name, value in headers:
        if _BAD_NAME.search(name) or _BREAKS.search(value):
            raise ValueError(f"header {name[:64]!r} carries CR, LF, NUL or a colon")
        out.append(b"%s: %s\r\n" % (name, value))
    return b"".join(out)


def _keep_alive_timeout(value: bytes) -> float:
    """``Keep-Alive: timeout=5, max=100`` -> 5 less a margin (the server may close at its edge:
    a second, or a quarter of a short timeout)."""
    for part in value.split(b","):
        k, _, v = part.strip().partition(b"=")
        if k.lower() == b"timeout":
            try:
                t = float(v)
            except ValueError:
                break
            return max(t - min(1.0, t / 4), 0.0)
    return IDLE_TIMEOUT


def origin_of(url: httpx.URL) -> Origin:
    return (url.raw_scheme, url.raw_host, url.port or (443 if url.raw_scheme == b"https" else 80))


class H1Transport(httpx.AsyncBaseTransport):
    """Keep-alive pool per (scheme, host, port); at most ``max_connections`` per origin.

    ``open`` is the lean entry point (the request already in wire bytes); ``handle_async_request``
    serves httpx on top of it.
    """

    def __init__(self, *, max_connections: int = 256, connect_timeout: float = 5.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self.ssl_context = ssl_context
        self._idle: dict[Origin, list[_Conn]] = {}
        self._slots: dict[Origin, _Slots] = {}
        self._sweeper: asyncio.TimerHandle | None = None  # closes expired idle connections
        self.waiting = 0  # requests sent (or in the outbox) whose answer's head has not come
        self._outbox = Outbox()  # requests sent while others wait: written at the turn's end

    async def open(self, origin: Origin, wire: bytes, *, deadline: float | None = None,
                   connect_timeout: float | None = None) -> Answer:
        """Send ``wire`` (a whole HTTP/1.1 request) and wait for the answer's head.
        ``deadline`` (loop time) bounds the whole exchange, body included."""
        slots = self._slots.get(origin)
        if slots is None:
            slots = self._slots[origin] = _Slots(self.max_connections)
        if not slots.take():  # every connection busy: wait no longer than the request may take
            try:
                async with asyncio.timeout_at(deadline):
                    await slots.wait()
            except TimeoutError:
                raise httpx.PoolTimeout(f"all {self.max_connections} connections (max_connections) "
                                        "stayed busy until the deadline") from None
        conn: _Conn | None = None
        try:
            for fresh in (False, True):
                conn = await self._connection(origin, connect_timeout or self.connect_timeout, fresh)
                conn._reset()
                conn.busy = True
                conn.slot = slots
                if self.waiting:  # others wait for their answers: with this turn's requests
                    self._outbox.add(conn.loop, conn, (wire,))
                else:
                    conn.transport.write(wire)  # type: ignore[union-attr]  # a busy connection is connected
                if deadline is None:
                    conn.deadline.clear()
                else:
                    conn.deadline.set(deadline)
                self.waiting += 1
                try:
                    await conn.head
                    break
                except httpx.ReadError:
                    # A pooled connection the server had closed (FIN) as the request went out:
                    # the keep-alive race, where nothing ran. Once more on a new connection. A
                    # reset (RST) is an answer of sorts, and retrying it is the router's to do
                    # (counted as an attempt): one retry policy, not two stacked.
                    if conn.reused and conn.received == 0 and not conn.reset_by_peer and not fresh:
                        conn.slot = None  # (kept for the next connection)
                        conn.drop()
                        conn = None
                        continue
                    raise
                finally:
                    self.waiting -= 1
        except BaseException:
            if conn is None:
                slots.release()
            else:
                conn.free()  # (unless the watchdog did)
                conn.drop()
            raise

        def done(c: _Conn) -> None:
            c.busy = False
            if c.reusable:
                loop = c.loop
                c.idle_since = loop.time()
                self._idle.setdefault(origin, []).append(c)
                if self._sweeper is None:
                    self._sweeper = loop.call_later(IDLE_TIMEOUT, self._sweep)
            else:
                c.drop()  # a half-read body: the connection cannot be reused
            c.free()  # (unless its deadline's watchdog gave it back already)

        assert conn is not None  # (the loop ends with a connection or raises)
        return Answer(conn, done)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        head = b"%s %s HTTP/1.1\r\n" % (request.method.encode(), url.raw_path)
        lines = header_lines(request.headers.raw)
        timeout = request.extensions.get("timeout", {})
        answer = await self.open(origin_of(url), head + lines + b"\r\n" + request.content,
                                 deadline=request.extensions.get("deadline"),
                                 connect_timeout=timeout.get("connect"))
        return httpx.Response(answer.status, headers=answer.conn.headers, stream=answer, request=request)

    async def _connection(self, origin: Origin, timeout: float, fresh: bool = False) -> _Conn:
        """A pooled connection still fit for use (most recent first), else a new one."""
        idle = self._idle.get(origin)
        while idle and not fresh:
            conn = idle.pop()
            if (not conn.closed and not conn.poisoned and conn.transport is not None
                    and not conn.transport.is_closing()
                    and conn.loop.time() - conn.idle_since < conn.idle_for):
                conn.reused = True
                return conn
            conn.drop()
        scheme, host, port = origin
        ctx = None
        if scheme == b"https":
            ctx = self.ssl_context or ssl.create_default_context()
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(_Conn, host.decode(), port, ssl=ctx), timeout)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host.decode()}:{port} timed out") from None
        except OSError as e:
            raise httpx.ConnectError(f"cannot connect to {host.decode()}:{port}: {e.strerror or e}") from None
        conn.reused = False
        return conn

    def _sweep(self) -> None:
        """Close the pool's expired connections (a busy pool reuses the newest first, so the
        oldest would otherwise sit open for as long as the server lets them)."""
        self._sweeper = None
        now = asyncio.get_running_loop().time()
        left = False
        for conns in self._idle.values():
            fit = [c for c in conns if not c.closed and not c.poisoned and now - c.idle_since < c.idle_for]
            if len(fit) < len(conns):
                keep = set(map(id, fit))
                for c in conns:
                    if id(c) not in keep:
                        c.drop()
                conns[:] = fit
            left = left or bool(fit)
        if left:
            self._sweeper = asyncio.get_running_loop().call_later(IDLE_TIMEOUT, self._sweep)

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conns in self._idle.values():
            for c in conns:
                c.drop()
        self._idle.clear()
