"""Writes gathered during one turn of the event loop, made back to back once it ends.

A write to a peer asleep on another core (a load balancer or sidecar on the same host, the
upstream of a local engine, a benchmark's load generator) wakes it, and on a VM that wake-up costs
the writer more than the write: perf put 14% of the gateway's CPU a request there, in the kernel
under its answers' and its upstream requests' writes. Written back to back, a turn's writes wake
such a peer about once. Callers defer a write only while other requests are in flight, so a lone
request waits for nothing; a deferred one waits for the rest of its turn.
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Sink(Protocol):
    """A connection that takes deferred writes."""

    def write_deferred(self, parts: tuple[bytes, ...]) -> None:
        """Write ``parts`` now, unless the connection is gone (whoever waits on it hears so)."""


class Outbox:
    """The turn's deferred writes, in the order they were added."""

    __slots__ = ("writes",)

    def __init__(self) -> None:
        self.writes: list[tuple[Sink, tuple[bytes, ...]]] = []

    def add(self, loop: asyncio.AbstractEventLoop, sink: Sink, parts: tuple[bytes, ...]) -> None:
        if not self.writes:
            loop.call_soon(self.flush)
        self.writes.append((sink, parts))

    def flush(self) -> None:
        writes, self.writes = self.writes, []
        for sink, parts in writes:
            sink.write_deferred(parts)
