"""Per-deployment requests and tokens in the current minute, for the ``usage`` strategy.

Counted where the policy store lives so replicas agree: in process for ``memory://``, in Redis
(one hash per minute, two fields per deployment, expiring after two minutes) otherwise. Minutes
are fixed windows of the replica's wall clock; a store that does not answer degrades to the local
counts rather than failing the request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from switchyard.policies.store import Store

log = logging.getLogger(__name__)

# One round trip: add requests and tokens, keep the hash for two windows.
_ADD = """
redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[3])
redis.call('HINCRBY', KEYS[1], ARGV[2], ARGV[4])
redis.call('EXPIRE', KEYS[1], 120)
return 1
"""


def minute(now: float | None = None) -> int:
    return int((time.time() if now is None else now) // 60)


class Counters(Protocol):
    async def read(self, names: Sequence[str]) -> list[tuple[int, int]]:
        """(requests, tokens) of each deployment this minute."""
        ...

    async def add(self, name: str, requests: int, tokens: int) -> None: ...


class LocalCounters:
    def __init__(self, clock: Any = time.time) -> None:
        self.clock = clock
        self._minute = -1
        self._counts: dict[str, list[int]] = {}

    def _now(self) -> dict[str, list[int]]:
        m = minute(self.clock())
        if m != self._minute:
            self._minute, self._counts = m, {}
        return self._counts

    async def read(self, names: Sequence[str]) -> list[tuple[int, int]]:
        counts = self._now()
        out = []
        for n in names:
            c = counts.get(n)
            out.append((c[0], c[1]) if c else (0, 0))
        return out

    async def add(self, name: str, requests: int, tokens: int) -> None:
        c = self._now().setdefault(name, [0, 0])
        c[0] += requests
        c[1] += tokens


class RedisCounters:
    """Counts in the shared Redis; one key per minute (hash-tagged: one cluster slot)."""

    def __init__(self, client: Any, ns: str, timeout: float, clock: Any = time.time) -> None:
        self.client = client
        self.ns = ns
        self.timeout = timeout
        self.clock = clock
        self.local = LocalCounters(clock)  # used while Redis does not answer

    def _key(self) -> str:
        return f"{{{self.ns}:route}}:{minute(self.clock())}"

    async def read(self, names: Sequence[str]) -> list[tuple[int, int]]:
        fields = [f"{n}\x1f{k}" for n in names for k in ("r", "t")]
        try:
            async with asyncio.timeout(self.timeout):
                vals = await self.client.execute_command("HMGET", self._key(), *fields)
        except Exception as e:  # any store trouble: balance on what this replica saw
            log.warning("usage counters unavailable: %s", e)
            return await self.local.read(names)
        nums = [int(v) if v is not None else 0 for v in vals]
        return [(nums[2 * i], nums[2 * i + 1]) for i in range(len(names))]

    async def add(self, name: str, requests: int, tokens: int) -> None:
        await self.local.add(name, requests, tokens)
        try:
            async with asyncio.timeout(self.timeout):
                await self.client.execute_command("EVAL", _ADD, 1, self._key(), f"{name}\x1fr",
                                                  f"{name}\x1ft", requests, tokens)
        except Exception as e:
            log.warning("usage counters unavailable: %s", e)


def counters_for(store: Store) -> Counters:
    """Counters living where ``store`` lives: shared through its Redis, or in this process."""
    if store.client is None:
        return LocalCounters()
    return RedisCounters(store.client, store.ns, store.timeout)
