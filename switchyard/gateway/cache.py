"""The response cache's step in a request's path (docs/cache.md): after admission, look the
request up; a hit replays the stored canonical chunks through the caller's renderer (as a stream
or whole) and calls no upstream; a miss runs as usual and keeps its answer once it ended cleanly.

Storage and the key are ``switchyard.policies.cache``'s; this module decides per request.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field

from switchyard.core.canonical import CanonicalRequest, Chunk
from switchyard.core.settings import CacheConfig
from switchyard.gateway.context import RequestContext
from switchyard.policies.cache import (
    Answers,
    cache_key,
    decode_entry,
    encode_entry,
    repeatable,
    scope_of,
    storable,
)

HEADER = "x-switchyard-cache"


def directives(headers: Mapping[str, str]) -> frozenset[str]:
    """The caller's Cache-Control directives, lower-case, without their arguments."""
    raw = headers.get("cache-control")
    if not raw:
        return frozenset()
    return frozenset(d.split("=", 1)[0].strip().lower() for d in raw.split(","))


@dataclass(slots=True)
class Lane:
    """How one request meets the cache: the header it answers with, the chunks of a hit to
    replay, and where to keep a miss's answer."""

    state: str  # hit | miss | bypass (a whole answer kept says stored)
    headers: dict[str, str] = field(default_factory=dict)
    hit: list[Chunk] | None = None
    answers: Answers | None = None  # set: keep the answer when it ends cleanly
    key: str = ""
    ttl_ms: int = 0
    got: list[Chunk] = field(default_factory=list)
    complete: bool = False  # the backend's stream ran to its end

    def chunks(self, upstream: Callable[[], AsyncGenerator[Chunk, None]]) -> AsyncGenerator[Chunk, None]:
        """What the request's answer is read from: the hit's chunks, or the upstream's (recorded
        when they may be kept)."""
        if self.hit is not None:
            return _replay(self.hit)
        if self.answers is None:
            return upstream()
        return self._recording(upstream())

    async def _recording(self, source: AsyncGenerator[Chunk, None]) -> AsyncGenerator[Chunk, None]:
        got = self.got
        try:
            async for ch in source:
                got.append(ch)
                yield ch
            self.complete = True
        finally:
            await source.aclose()

    async def keep(self, streamed: bool, chunks: list[Chunk] | None = None) -> bool:
        """Store the answer if it may be kept: the whole of it arrived, and nothing filtered or
        failed it. True when it was stored."""
        if self.answers is None:
            return False
        got = chunks if chunks is not None else self.got
        if not (self.complete or chunks is not None) or not storable(got):
            return False
        value = encode_entry(got, streamed)
        return await self.answers.put(self.key, value, self.ttl_ms)


async def _replay(chunks: list[Chunk]) -> AsyncGenerator[Chunk, None]:
    for ch in chunks:
        yield ch


async def lane_for(ctx: RequestContext, req: CanonicalRequest, rule: CacheConfig, answers: Answers,
                   headers: Mapping[str, str]) -> Lane:
    """Look ``req`` up under ``rule``; never raises (a store that fails is a miss)."""
    said = directives(headers)
    if rule.repeatable_only and not repeatable(req):
        return Lane("bypass")
    p, route = ctx.principal, ctx.route
    assert p is not None and route is not None
    key = cache_key(req, route.group, scope_of(rule, p))
    keep = answers if "no-store" not in said else None
    lane = Lane("miss", answers=keep, key=key, ttl_ms=int(rule.ttl * 1000))
    if "no-cache" in said:  # a fresh answer, which refreshes the entry (unless no-store too)
        lane.state = "bypass"
        return lane
    value = await answers.get(key)
    entry = decode_entry(value) if value is not None else None
    # A native lane's thinking blocks come whole or in a stream's pieces: such an answer is
    # replayed only the way it was given.
    if entry is not None and (entry.streamed == req.stream or not any(ch.thinking for ch in entry.chunks)):
        lane.state, lane.hit, lane.answers = "hit", entry.chunks, None
        lane.headers["age"] = str(max(int(time.time() * 1000) - entry.created_ms, 0) // 1000)
    return lane


__all__ = ["HEADER", "Lane", "directives", "lane_for"]
