"""Redis's buffer: each team's record stream (``settle.lua`` appends to it), read by a consumer group.

Every replica is a consumer of the group ``ledger`` on every team's stream:

    XREADGROUP ... STREAMS <log> >    new records (any replica's), delivered to one consumer each
    INSERT ... ON CONFLICT DO NOTHING  (switchyard/policies/ledger/sink.py)
    XACK, then trim                    only entries the group acknowledged (TRIM below)

A batch the ledger refused stays pending under this consumer and is read again (``0``) until it is
written. A replica that dies (SIGKILL) leaves its pending entries behind; every ``claim_idle``
seconds each replica takes over entries pending longer than that (XAUTOCLAIM) and writes them.
The stream is bounded by ``settle.lua``'s MAXLEN (``usage.backlog_max``): reached only when the
ledger has been down that long, and then the oldest records are lost to the ledger (counted and
logged; the Redis aggregates still have them).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import ResponseError

from switchyard.policies.ledger.feed import Feed
from switchyard.policies.ledger.sink import PgSink
from switchyard.policies.plan import tag

log = logging.getLogger("switchyard.ledger")

GROUP = "ledger"

# Trim a stream to what the group has not acknowledged: everything older than its oldest pending
# entry, and at most up to the last entry delivered, has been acknowledged (newer deliveries only
# come after the last delivered id). One script: nothing moves between the reads and the trim.
TRIM = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1])
local min = p[2]
if not min then
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local name, last = nil, nil
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name == ARGV[1] then min = last end
  end
end
if not min or min == '0-0' then return 0 end
return redis.call('XTRIM', KEYS[1], 'MINID', min)
"""

Entries = list[tuple[bytes, dict[bytes, bytes] | None]]


class RedisFeed(Feed):
    def __init__(self, client: Any, ns: str, sink: PgSink, teams: Callable[[], Awaitable[list[str]]], *,
                 batch: int = 500, interval: float = 0.2, claim_idle: float = 30.0,
                 timeout: float = 5.0) -> None:
        super().__init__(sink, batch=batch, interval=interval)
        self.client = client
        self.ns = ns
        self.teams = teams
        self.claim_idle_ms = int(claim_idle * 1000)
        self.timeout = timeout
        self.consumer = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.lost = 0  # records trimmed from a stream before the ledger had them
        self._trim = client.register_script(TRIM)
        self._groups: set[str] = set()  # streams whose group this replica has made sure of
        self._retry: set[str] = set()  # streams with entries pending here that the ledger refused
        self._next_claim = 0.0

    def stream(self, team: str) -> str:
        return f"{self.ns}:{tag(team)}:log"

    async def step(self) -> int:
        claim = time.monotonic() >= self._next_claim
        taken = 0
        for team in await self.teams():
            taken += await self._drain(self.stream(team), claim)
        if claim:
            self._next_claim = time.monotonic() + self.claim_idle_ms / 2000
        return taken

    async def _drain(self, key: str, claim: bool) -> int:
        async with asyncio.timeout(self.timeout):
            if key not in self._groups:
                try:
                    await self.client.xgroup_create(key, GROUP, id="0", mkstream=True)
                except ResponseError as e:
                    if "BUSYGROUP" not in str(e):
                        raise
                self._groups.add(key)
            # Ours that the ledger refused first (``0``: this consumer's pending), else new ones.
            start = "0" if key in self._retry else ">"
            try:
                entries: Entries = await self._read(key, start)
            except ResponseError as e:
                if "NOGROUP" in str(e):  # the stream was deleted (a Redis without persistence restarted)
                    self._groups.discard(key)
                    self._retry.discard(key)
                    return 0
                raise
            if claim and len(entries) < self.batch:
                r = await self.client.xautoclaim(key, GROUP, self.consumer, self.claim_idle_ms, "0-0",
                                                 count=self.batch - len(entries))
                entries += r[1]
                self._count_lost(len(r[2]) if len(r) > 2 else 0, key)
        if not entries:
            self._retry.discard(key)
            return 0
        self._retry.add(key)  # until acknowledged: a failure below leaves them pending here
        records = []
        for eid, f in entries:
            if f:  # None: trimmed while pending
                fields = {k.decode(): v.decode() for k, v in f.items()}
                if not fields.get("ticket_id"):  # a record older than ticket ids: its entry names it
                    fields["ticket_id"] = f"{key}/{eid.decode()}"
                records.append(fields)
        self._count_lost(len(entries) - len(records), key)
        self.written += await self.sink.write(records)
        async with asyncio.timeout(self.timeout):
            await self.client.xack(key, GROUP, *[eid for eid, _ in entries])
            if start == ">" or len(entries) < self.batch:
                self._retry.discard(key)
            await self._trim(keys=[key], args=[GROUP])
        return len(entries)

    async def _read(self, key: str, start: str) -> Entries:
        r = await self.client.xreadgroup(GROUP, self.consumer, {key: start}, count=self.batch)
        if not r:
            return []
        return list(r[0][1]) if isinstance(r, list) else list(next(iter(r.values()))[0])

    def _count_lost(self, n: int, key: str) -> None:
        if n:
            self.lost += n
            log.error("usage ledger: %d records of %s were trimmed before they were written "
                      "(usage.backlog_max reached while the ledger was down)", n, key)
