"""A minimal pipelined RESP2 client for the hot path: pre-encoded EVALSHA in, small reply out.

redis-py's asyncio connection (stream reader, lock, health checks, generic parser) costs about as
much as the loopback round trip itself. This client is one ``asyncio.Protocol`` per Redis node:
``request`` writes the pre-encoded command at once and returns a future; replies are matched to
requests in order (Redis answers one connection's commands in order), so any number of
concurrent requests share one connection. Everything else (admin reads, cluster topology,
redirects, SCRIPT LOAD) stays with redis-py.

A connection opened with a ``timeout`` keeps that deadline for every request itself: one timer
per connection, armed for the oldest unanswered request. Replies come in order, so when that one
is overdue the link is stalled: it fails with ``TimeoutError``, the connection is dropped, and
the requests behind it fail with ``ConnectionError`` (their callers may try a fresh connection
within their own deadline). A caller then needs no ``asyncio.timeout`` of its own, which cost a
timer per call.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import hiredis


class ReplyError(Exception):
    """An error reply (``-ERR ...``, ``-NOSCRIPT ...``, ``-MOVED ...``)."""

    @property
    def code(self) -> str:
        return str(self.args[0]).split(" ", 1)[0]


class RespConnection(asyncio.Protocol):
    """One pipelined connection. ``request`` raises ``ConnectionError`` once the link is gone."""

    def __init__(self, timeout: float | None = None) -> None:
        # Made by its loop (``open``), and kept: asking asyncio for the running loop costs a
        # getpid() system call on 3.11.
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._waiters: deque[asyncio.Future[Any]] = deque()
        # hiredis parses replies in C (an admission's eight integers: 0.6 us against 8.3 in
        # Python); an error reply comes back as a ReplyError, not raised.
        self._reader = hiredis.Reader(replyError=ReplyError)
        self._out: list[bytes] = []  # deferred commands, written on the loop's next turn
        self.lost = False
        self.timeout = timeout
        self._due: deque[float] = deque()  # with a timeout: each waiter's deadline, in step
        self._watch: asyncio.TimerHandle | None = None

    @classmethod
    async def open(cls, host: str | None, port: int | None, *, path: str | None = None,
                   username: str | None = None, password: str | None = None, db: int = 0,
                   timeout: float | None = None) -> RespConnection:
        loop = asyncio.get_running_loop()
        if path:
            _, proto = await loop.create_unix_connection(lambda: cls(timeout), path)
        else:
            assert host is not None and port is not None, "a TCP connection needs host and port"
            _, proto = await loop.create_connection(lambda: cls(timeout), host, port)
        try:
            if password:
                user = (username.encode(),) if username else ()
                await proto.request(encode((b"AUTH", *user, password.encode())))
            if db:
                await proto.request(encode((b"SELECT", str(db).encode())))
        except BaseException:
            proto.close()
            raise
        return proto

    # -- asyncio.Protocol --
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # asyncio gives a stream protocol a Transport

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        waiters = self._waiters
        while True:
            try:
                v = reader.gets()
            except hiredis.ProtocolError as e:
                self._fail(ConnectionError(f"bad reply: {e}"))
                return
            if v is False:  # no whole reply (more) yet
                break
            if not waiters:  # a reply nobody asked for: the stream is out of step
                self._fail(ConnectionError("unexpected reply"))
                return
            fut = waiters.popleft()
            if self.timeout is not None:
                self._due.popleft()
            if not fut.done():  # a timed-out caller has gone; its reply is simply dropped
                if isinstance(v, ReplyError):
                    fut.set_exception(v)
                else:
                    fut.set_result(v)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.transport = None
        self._fail(ConnectionError(f"connection lost: {exc}" if exc else "connection closed"))

    # -- client --
    def request(self, packed: bytes, *, defer: bool = False) -> asyncio.Future[Any]:
        """Queue one pre-encoded command; the future gets its reply (or the error).

        Commands go out in the order of ``request`` calls. With ``defer`` the write waits for
        the event loop's next turn, so its syscall is off the caller's path and commands queued
        in the same turn share one write. Without it the command is written now when no reply
        is pending; else it waits for that turn too: Redis answers in order, so it could not
        answer this command before the pending ones anyway, and under load the commands of a
        turn go out together (about 5% of a request's CPU with Redis and four limits).
        """
        if self.lost or self.transport is None or self.transport.is_closing():
            raise ConnectionError("connection closed")
        loop = self.loop
        fut = loop.create_future()
        defer = defer or bool(self._waiters)
        self._waiters.append(fut)
        if self.timeout is not None:
            due = loop.time() + self.timeout
            self._due.append(due)
            if self._watch is None:
                self._watch = loop.call_at(due, self._check)
        if defer:
            if not self._out:
                loop.call_soon(self._flush)
            self._out.append(packed)
        else:  # (nothing deferred either: a deferred command is a pending reply)
            self.transport.write(packed)
        return fut

    def _flush(self) -> None:
        if self._out and self.transport is not None and not self.lost:
            data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
            self._out.clear()
            self.transport.write(data)

    def _check(self) -> None:
        """The watchdog: fail the link when its oldest request is overdue, else wait for it."""
        self._watch = None
        if not self._due or self.lost:
            return
        due = self._due[0]
        loop = self.loop
        if due > loop.time():
            self._watch = loop.call_at(due, self._check)
        else:
            self._fail(TimeoutError(f"Redis did not answer within {self.timeout:g} s"),
                       ConnectionError("connection dropped: a command ahead of this one timed out"))

    def _fail(self, err: Exception, behind: Exception | None = None) -> None:
        """Fail every waiter with ``err``; given ``behind``, only the first gets ``err`` and the
        rest ``behind``."""
        self.close()
        self._due.clear()
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(err)
                fut.exception()  # nobody may be left to retrieve it
            if behind is not None:
                err = behind

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.abort()


_HEADS = tuple(b"$%d\r\n" % n for n in range(256))  # a bulk string's head, by its length


def bulk(a: Any) -> bytes:
    """One RESP bulk string (a request builds a score of them: its head looked up, not formatted)."""
    b = a if type(a) is bytes else (a if type(a) is str else str(a)).encode()
    n = len(b)
    return b"".join((_HEADS[n] if n < 256 else b"$%d\r\n" % n, b, b"\r\n"))


def bulks(args: Any) -> bytes:
    """Bulk strings one after another: a command's arguments without their count (a script's
    static arguments are encoded once this way; see ``redis_store._Packed``). Several times faster
    than redis-py's packer."""
    return b"".join([bulk(a) for a in args])


def encode(args: Any) -> bytes:
    """A whole command."""
    return b"*%d\r\n" % len(args) + bulks(args)
