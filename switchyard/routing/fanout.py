"""Fan-out emulation: what one upstream call cannot carry becomes several parallel calls.

* ``n`` > 1 to an upstream whose dialect has no ``n``: n calls.
* several prompts to an upstream that takes one (SGP): one call per prompt.
* ``best_of`` to an upstream without it: ``best_of`` candidates per prompt (asked with logprobs),
  ranked by mean token logprob; the best ``n`` are returned.
* more embedding inputs than one call takes (Titan: one; Cohere: 96): calls of as many as it
  takes, at most ``EMBED_CONCURRENCY`` at once, the vectors merged in input order.

Choices are re-indexed as one call would have numbered them (prompt-major: ``prompt * n + k``),
chunks of a stream interleave as they arrive, and usage is summed into one closing chunk.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from switchyard.core.canonical import CanonicalRequest, Chunk, Prompt, TokenLogprob, Usage, replace
from switchyard.routing.resolve import Caps

Call = Callable[[CanonicalRequest], AsyncGenerator[Chunk, None]]
_DONE = object()
# Embedding calls of one request in flight at once: a 2048-input request to Titan (one input a
# call) must not open 2048 connections nor trip the account's rate limit in one burst.
EMBED_CONCURRENCY = 8


@dataclass(slots=True)
class Sub:
    """One upstream call of a fan-out and where its choices land in the merged answer."""

    req: CanonicalRequest
    prompt0: int  # its first prompt's index in the caller's request
    choice0: int  # its first choice's index within a prompt
    per_prompt: int  # choices it returns per prompt

    def index(self, i: int, n: int) -> int:
        return (self.prompt0 + i // self.per_prompt) * n + self.choice0 + i % self.per_prompt


def needs_fanout(req: CanonicalRequest, caps: Caps) -> bool:
    n = req.n or 1
    if req.kind == "embedding":
        return caps.embed_inputs is not None and len(req.prompt or ()) > caps.embed_inputs
    if req.kind == "chat":
        return n > 1 and not caps.chat_n
    return ((n > 1 and not caps.n) or (req.prompt is not None and len(req.prompt) > 1 and not caps.prompts)
            or (req.best_of is not None and req.best_of > n and not caps.best_of))


def plan(req: CanonicalRequest, caps: Caps) -> list[Sub]:
    n = req.n or 1
    prompts = req.prompt
    split = prompts is not None and len(prompts) > 1 and (not caps.prompts or _best_of(req, caps))
    groups = [([p], i) for i, p in enumerate(prompts)] if split and prompts else [(prompts, 0)]
    subs: list[Sub] = []
    for ps, p0 in groups:
        if _best_of(req, caps):
            k = req.best_of or 1
            lp = req.logprobs if req.logprobs is not None else 0  # ranking needs the chosen tokens'
            if caps.n:
                subs.append(Sub(replace(req, prompt=ps, n=k, best_of=None, logprobs=lp, stream=False),
                                p0, 0, k))
            else:
                subs += [Sub(replace(req, prompt=ps, n=None, best_of=None, logprobs=lp, stream=False),
                             p0, j, 1) for j in range(k)]
        elif n > 1 and not (caps.chat_n if req.kind == "chat" else caps.n):
            subs += [Sub(replace(req, prompt=ps, n=None), p0, j, 1) for j in range(n)]
        else:
            subs.append(Sub(replace(req, prompt=ps), p0, 0, n))
    return subs


def _best_of(req: CanonicalRequest, caps: Caps) -> bool:
    return req.best_of is not None and req.best_of > (req.n or 1) and not caps.best_of


async def fan_out(call: Call, req: CanonicalRequest, caps: Caps) -> AsyncGenerator[Chunk, None]:
    if req.kind == "embedding":
        yield await _embed(call, req, caps.embed_inputs or 1)
        return
    subs = plan(req, caps)
    if _best_of(req, caps):
        merged = _merge(call, subs, req.best_of or 1)
        try:
            async for ch in _rank(merged, req):
                yield ch
        finally:
            await merged.aclose()
        return
    merged = _merge(call, subs, req.n or 1)
    try:
        async for ch in merged:
            yield ch
    finally:
        await merged.aclose()


async def _merge(call: Call, subs: list[Sub], n: int) -> AsyncGenerator[Chunk, None]:
    """Run every sub-call at once; yield their chunks re-indexed, then the summed usage. The first
    failure of any call fails the whole (the others are cancelled)."""
    queue: asyncio.Queue[tuple[int, object]] = asyncio.Queue()

    async def pump(i: int, sub: Sub) -> None:
        gen = call(sub.req)
        try:
            async for ch in gen:
                queue.put_nowait((i, ch))
            queue.put_nowait((i, _DONE))
        except Exception as e:
            queue.put_nowait((i, e))
        finally:
            await gen.aclose()

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(subs)]
    usage: Usage | None = None
    try:
        left = len(tasks)
        while left:
            i, item = await queue.get()
            if item is _DONE:
                left -= 1
                continue
            if isinstance(item, Exception):
                raise item
            assert isinstance(item, Chunk)
            ch = item
            if ch.usage is not None:
                usage = Usage() if usage is None else usage
                usage += ch.usage
                ch.usage = None
                if not (ch.text or ch.finish_reason or ch.logprobs or ch.role or ch.tool_calls):
                    continue  # a usage-only chunk: folded into the sum
            ch.index = subs[i].index(ch.index, n)
            yield ch
        if usage is not None:
            yield Chunk(index=0, usage=usage)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _embed(call: Call, req: CanonicalRequest, size: int) -> Chunk:
    """The inputs in calls of ``size``, at most ``EMBED_CONCURRENCY`` at once: one chunk with every
    vector in input order and the usage summed. The first failure fails the whole (the calls
    still waiting or under way are cancelled)."""
    prompts = req.prompt or []
    gate = asyncio.Semaphore(EMBED_CONCURRENCY)

    async def one(part: list[Prompt]) -> tuple[list[list[float]], Usage | None]:
        async with gate:
            vectors: list[list[float]] = []
            usage: Usage | None = None
            gen = call(replace(req, prompt=part))
            try:
                async for ch in gen:
                    vectors += ch.embeddings or ()
                    if ch.usage is not None:
                        usage = usage or Usage()
                        usage += ch.usage
            finally:
                await gen.aclose()
            return vectors, usage

    tasks = [asyncio.create_task(one(prompts[i:i + size])) for i in range(0, len(prompts), size)]
    try:
        done = await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    # A call that reported no usage leaves the whole to the gateway's own estimate.
    usage: Usage | None = Usage()
    for _, u in done:
        if usage is None or u is None:
            usage = None
        else:
            usage += u
    return Chunk(embeddings=[v for vs, _ in done for v in vs], usage=usage, finish_reason="stop")


def mean_logprob(lps: list[TokenLogprob] | None) -> float:
    """The mean over the tokens that have a logprob (echo's first prompt token has none)."""
    scored = [t.logprob for t in lps or () if t.logprob is not None]
    return sum(scored) / len(scored) if scored else -math.inf


async def _rank(merged: AsyncGenerator[Chunk, None], req: CanonicalRequest) -> AsyncGenerator[Chunk, None]:
    """Gather every candidate, keep the best ``n`` of each prompt by mean token logprob."""
    k, n = req.best_of or 1, req.n or 1
    cands: dict[int, Chunk] = {}
    usage: Usage | None = None
    async for ch in merged:
        if ch.usage is not None:
            usage = ch.usage
            if not (ch.text or ch.finish_reason):
                continue
        c = cands.get(ch.index)
        if c is None:
            cands[ch.index] = Chunk(index=ch.index, text=ch.text, finish_reason=ch.finish_reason,
                                    logprobs=list(ch.logprobs or []), stop_word=ch.stop_word)
        else:
            c.text += ch.text
            c.finish_reason = ch.finish_reason or c.finish_reason
            c.stop_word = ch.stop_word or c.stop_word
            c.logprobs = (c.logprobs or []) + (ch.logprobs or [])
    for p in range(len(req.prompt or [None])):
        pool = [cands[i] for i in range(p * k, p * k + k) if i in cands]
        pool.sort(key=lambda c: mean_logprob(c.logprobs), reverse=True)
        for rank, c in enumerate(pool[:n]):
            c.index = p * n + rank
            c.tokens = len(c.logprobs) if c.logprobs else None
            if req.logprobs is None:
                c.logprobs = None  # asked for ranking only
            yield c
    if usage is not None:
        yield Chunk(index=0, usage=usage)
