"""The loop that drains a write-ahead buffer into the ledger, off the hot path, in batches.

A feed's ``step`` moves at most one batch per buffer and raises when the ledger is down; the
buffer keeps what was not written, and ``run`` tries again with backoff. Nothing is removed from
a buffer before the ledger committed it, and the ledger ignores a record it already has, so every
record is written exactly once however often a step is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from itertools import islice

from switchyard.policies.ledger.sink import PgSink
from switchyard.policies.store import UsageRecord

log = logging.getLogger("switchyard.ledger")

MAX_BACKOFF = 5.0


class Feed:
    """Base: ``run`` until ``stop``; subclasses implement ``step``."""

    def __init__(self, sink: PgSink, *, batch: int = 500, interval: float = 0.2) -> None:
        self.sink = sink
        self.batch = batch
        self.interval = interval
        self.written = 0  # rows new to the ledger, since start
        self.failures = 0
        self._stopping = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._down_since: float | None = None

    async def step(self) -> int:
        """Move one batch per buffer into the ledger; how many records were taken (0: idle)."""
        raise NotImplementedError

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run())

    async def run(self) -> None:
        pause = self.interval
        while not self._stopping:
            try:
                taken = await self.step()
            except Exception as e:  # the ledger (or the buffer) is down: keep everything, retry
                self.failures += 1
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    log.warning("usage ledger write failed, records wait in the buffer: %s: %s",
                                type(e).__name__, e)
                await self._sleep(pause)
                pause = min(pause * 2, MAX_BACKOFF)
                continue
            if self._down_since is not None:
                log.info("usage ledger back after %.1f s", time.monotonic() - self._down_since)
                self._down_since = None
            pause = self.interval
            if taken < self.batch:
                await self._sleep(self.interval)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    async def stop(self, drain: float = 5.0) -> None:
        """Stop the loop, then write what is left for up to ``drain`` seconds."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        try:
            async with asyncio.timeout(drain):
                while await self.step():
                    pass
        except Exception as e:
            log.error("usage ledger: stopping with records unwritten (%s: %s); %s", type(e).__name__, e,
                      self.left_behind)

    @property
    def left_behind(self) -> str:
        """What becomes of records not written when the process stops."""
        return "they stay in the buffer for the next consumer"


class QueueFeed(Feed):
    """memory://'s buffer: a bounded queue in the process. Records in it are lost with the process
    (as every other memory:// counter is); past ``maxlen`` the oldest are dropped and counted."""

    def __init__(self, sink: PgSink, *, maxlen: int = 1_000_000, batch: int = 500,
                 interval: float = 0.2) -> None:
        super().__init__(sink, batch=batch, interval=interval)
        self.maxlen = maxlen
        self.dropped = 0
        self._q: deque[UsageRecord] = deque()

    def put(self, record: UsageRecord) -> None:
        if len(self._q) >= self.maxlen:
            self._q.popleft()
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 10_000 == 0:
                log.error("usage ledger queue full (%d): %d records dropped so far", self.maxlen,
                          self.dropped)
        self._q.append(record)

    @property
    def pending(self) -> int:
        return len(self._q)

    @property
    def left_behind(self) -> str:
        return f"{len(self._q)} queued records are lost with the process"

    async def step(self) -> int:
        batch = list(islice(self._q, self.batch))
        if not batch:
            return 0
        self.written += await self.sink.write([r.as_fields() for r in batch])
        # Drop what was written; the queue may have shed some of it meanwhile (full).
        for r in batch:
            if self._q and self._q[0] is r:
                self._q.popleft()
        return len(batch)
