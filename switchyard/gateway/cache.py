"""The response cache's step in a request's path (docs/cache.md): after admission, look the
request up; a hit replays the stored canonical chunks through the caller's renderer (as a stream
or whole) and calls no upstream; a miss runs as usual and keeps its answer once it ended cleanly.

Storage and the key are ``switchyard.policies.cache``'s; this module decides per request.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping

from switchyard.core.canonical import CanonicalRequest, Chunk
from switchyard.core.settings import CacheConfig
from switchyard.gateway.context import RequestContext
from switchyard.policies.cache import (
    Answers,
    cache_key,
    decode_entry,
    encode_entry,
    index_entry,
    nearest,
    repeatable,
    scope_of,
    semantic_text,
    storable,
)

HEADER = "x-switchyard-cache"
MATCH_HEADER = "x-switchyard-cache-match"  # on a hit: exact, or semantic (a near-identical prompt)
# The prompt's vector from the built-in embedder; None when it could not say.
Embed = Callable[[str], Awaitable[list[float] | None]]


def directives(raw: str | None) -> frozenset[str]:
    """The directives of a Cache-Control header's value, lower-case, without their arguments."""
    if not raw:
        return _NONE
    return frozenset(d.split("=", 1)[0].strip().lower() for d in raw.split(","))


_NONE: frozenset[str] = frozenset()


class Lane:
    """How one request meets the cache: the header it answers with, the chunks of a hit to
    replay, and where to keep a miss's answer. Built for every request under a rule: a plain
    slotted class, no default factories."""

    __slots__ = ("answers", "complete", "got", "headers", "hit", "key", "semantic", "state", "ttl_ms")

    def __init__(self, state: str, answers: Answers | None = None, key: str = "", ttl_ms: int = 0) -> None:
        self.state = state  # hit | miss | bypass (a whole answer kept says stored)
        self.answers = answers  # set: keep the answer when it ends cleanly
        self.key = key
        self.ttl_ms = ttl_ms
        self.headers: dict[str, str] | None = None  # a hit's age and match
        self.hit: list[Chunk] | None = None
        self.got: list[Chunk] = []  # a stream's chunks as recorded
        self.complete = False  # the backend's stream ran to its end
        # Semantic mode: (the scope's index, the request's group, the prompt's vector), to index
        # a kept answer under.
        self.semantic: tuple[str, str, list[float]] | None = None

    def chunks(self, upstream: Callable[[], AsyncGenerator[Chunk, None]],
               streamed: bool) -> AsyncGenerator[Chunk, None]:
        """What the request's answer is read from: the hit's chunks, or the upstream's (a stream's
        recorded when they may be kept; a whole answer's are gathered anyway and passed to
        ``keep``)."""
        if self.hit is not None:
            return _replay(self.hit)
        if self.answers is None or not streamed:
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
        if not await self.answers.put(self.key, value, self.ttl_ms):
            return False
        if self.semantic is not None:
            scope, group, vector = self.semantic
            await self.answers.index(scope, index_entry(group, vector, self.key), self.ttl_ms)
        return True


async def _replay(chunks: list[Chunk]) -> AsyncGenerator[Chunk, None]:
    for ch in chunks:
        yield ch


async def lane_for(ctx: RequestContext, req: CanonicalRequest, rule: CacheConfig, answers: Answers,
                   headers: Mapping[str, str], embed: Embed | None = None) -> Lane:
    """Look ``req`` up under ``rule``; never raises (a store that fails is a miss). In semantic
    mode an exact miss of a single-turn request without tools may be served by the answer to a
    near-identical prompt of the same group (``embed`` gives the vectors)."""
    if rule.repeatable_only and not repeatable(req):
        return Lane("bypass")
    p, route = ctx.principal, ctx.route
    assert p is not None and route is not None
    scope = scope_of(rule, p)
    key = cache_key(req, route.group, scope)
    said = directives(headers.get("cache-control"))
    lane = Lane("miss", answers if "no-store" not in said else None, key, int(rule.ttl * 1000))
    if "no-cache" in said:  # a fresh answer, which refreshes the entry (unless no-store too)
        lane.state = "bypass"
        return lane
    value = await answers.get(key)
    if value is None and (embed is None or rule.threshold is None):
        return lane
    match = "exact"
    # An exact miss in semantic mode: the prompt's vector finds a near one of the same group (and
    # indexes this answer when it is kept).
    text = semantic_text(req) if value is None else None
    vector = await embed(text) if text is not None and embed is not None else None
    if vector is not None and rule.threshold is not None:
        index = f"{scope}\x1f{route.group}"
        group = cache_key(req, route.group, scope, without_prompt=True)
        lane.semantic = (index, group, vector)
        near = nearest(await answers.neighbours(index), group, vector, rule.threshold)
        if near is not None:
            value, match = await answers.get(near), "semantic"
    entry = decode_entry(value) if value is not None else None
    # A native lane's thinking blocks come whole or in a stream's pieces: such an answer is
    # replayed only the way it was given.
    if entry is not None and (entry.streamed == req.stream or not any(ch.thinking for ch in entry.chunks)):
        lane.state, lane.hit, lane.answers = "hit", entry.chunks, None
        lane.headers = {"age": str(max(int(time.time() * 1000) - entry.created_ms, 0) // 1000),
                        MATCH_HEADER: match}
    return lane


__all__ = ["HEADER", "MATCH_HEADER", "Embed", "Lane", "directives", "lane_for"]
