"""The router: pick a deployment, run the request on it, and keep the model name's promise when
deployments are slow, failing or rate-limited.

Per request: fit the context window (maybe switching to ``context_fallback``), then for the group
and each of its ``fallbacks`` in turn, up to ``1 + retries`` attempts on healthy deployments
(fresh ones first; re-trying one already tried waits a jittered backoff), all inside the request's
deadline. Only failures before the first chunk are retried: once a chunk went out, an error
propagates as is.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from backends.base import Backend
from gateway.canonical import CanonicalRequest, Chunk
from gateway.config import Config
from gateway.errors import GatewayError, InvalidRequest, RateLimited, Unavailable
from gateway.routing.fanout import fan_out, needs_fanout
from gateway.routing.health import Health
from gateway.routing.resolve import Resolver, Route, RunInfo, Target
from gateway.routing.retry import backoff, deadline_exceeded, retry_after_header, retryable
from gateway.routing.strategies import PICKERS, by_usage
from gateway.routing.usage import Counters, LocalCounters, counters_for

Attempt = tuple[AsyncIterator[Chunk], Chunk | None]


class Router:
    def __init__(self, config: Config, backends: dict[str, Backend] | None = None, *,
                 rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """``backends`` maps ``group/deployment`` to a ready-made backend (tests); the rest are
        built from the config. ``rng`` and ``clock`` are injectable for tests."""
        self.config = config
        self.rc = config.router
        self.resolver = Resolver(config, self.rc, backends)
        self.rng = rng or random.Random()
        self.clock = clock
        self.counters: Counters = LocalCounters()

    def use_store(self, store: Any) -> None:
        """Count per-deployment usage (the ``usage`` strategy) where the policy store lives."""
        self.counters = counters_for(store)

    @property
    def targets(self) -> list[Target]:
        return [t for ts in self.resolver.targets.values() for t in ts]

    def resolve(self, name: str) -> Route:
        return self.resolver.resolve(name)

    # -- running a request -------------------------------------------------------------------

    async def stream(self, req: CanonicalRequest, route: Route, info: RunInfo) -> AsyncIterator[Chunk]:
        """Run ``req`` on a deployment of ``route`` (or a fallback); yield its chunks."""
        deadline = self.clock() + req.timeout if req.timeout else None
        asked = route.group
        route = self._fit(req, route, info)
        target, served, (gen, first) = await self._first(req, route, asked, info, deadline)
        h = target.health
        count = served.model.strategy == "usage"
        tokens = 0
        try:
            if first is not None:
                yield first
                async for ch in gen:
                    if count and ch.usage is not None:
                        tokens = ch.usage.completion_tokens
                    yield ch
        except GatewayError as e:
            if retryable(e):  # the deployment broke off mid-answer: counts against its health
                h.breaker.failure(self.clock())
            raise
        finally:
            h.inflight -= 1
            await gen.aclose()
            if count and tokens:
                await self.counters.add(target.name, 0, tokens)

    async def _first(self, req: CanonicalRequest, route: Route, asked: str, info: RunInfo,
                     deadline: float | None) -> tuple[Target, Route, Attempt]:
        """Attempts until one yields its first chunk (or ends cleanly); raises when none can."""
        rc = self.rc
        last: GatewayError | None = None
        saturated = False
        for r in self._chain(req, route, info):
            tried: list[Target] = []
            budget = 1 + rc.retries
            waited = False
            while budget > 0:
                now = self.clock()
                if deadline is not None and now >= deadline:
                    raise deadline_exceeded(req.timeout, info.attempts)
                target, full = await self._pick(r, tried, now, info)
                saturated |= full
                if target is None:
                    # Everything is cooling down: wait for the soonest when the wait is short.
                    wait = self._soonest(r, now)
                    limit = deadline - now if deadline is not None else rc.backoff_max
                    if not tried or wait is None or wait <= 0 or wait > limit:
                        break  # (wait 0: another request is probing; not worth spinning on)
                    await asyncio.sleep(wait)
                    waited = True
                    continue
                if target in tried and not waited:
                    pause = backoff(rc, len(tried), self.rng)
                    if deadline is not None and now + pause >= deadline:
                        raise deadline_exceeded(req.timeout, info.attempts)
                    await asyncio.sleep(pause)
                    if not target.health.breaker.allows(self.clock()):
                        continue  # another request took the probe meanwhile: pick again
                waited = False
                budget -= 1
                tried.append(target)
                info.attempts += 1
                info.tried.append(target.name)
                info.deployment = target.name
                info.fallback = r.group if r.group != asked else None
                out = await self._try(target, req, r, info, deadline)
                if not isinstance(out, GatewayError):
                    return target, r, out
                if not retryable(out):
                    raise out
                last = out
        if last is not None:
            raise retry_after_header(last, getattr(last, "retry_after", None))
        raise self._none_available(req, route, info, saturated)

    async def _try(self, target: Target, req: CanonicalRequest, route: Route, info: RunInfo,
                   deadline: float | None) -> Attempt | GatewayError:
        """One attempt, up to its first chunk. A retryable failure is returned, not raised."""
        h = target.health
        start = self.clock()
        h.breaker.acquire(start)
        h.inflight += 1
        if deadline is not None:
            req.timeout = deadline - start  # the upstream's own timeout ends with the request's
        gen = self._open(target, req, route)
        try:
            if deadline is None or target.deployment.backend == "upstream":
                # An upstream call enforces req.timeout itself (httpx timeouts): no timer needed.
                first = await anext(gen)
            else:
                async with asyncio.timeout(deadline - start):
                    first = await anext(gen)
        except StopAsyncIteration:
            first = None
        except GatewayError as e:
            h.inflight -= 1
            await gen.aclose()
            if retryable(e):
                now = self.clock()
                h.observe(now - start)  # a failure is slow news too: keeps the latency strategy honest
                hold = getattr(e, "retry_after", None) if e.status in (429, 503) else None
                h.breaker.failure(now, hold)
            else:
                h.breaker.release()  # the caller's fault says nothing about the deployment
            return e
        except TimeoutError:
            h.inflight -= 1
            await gen.aclose()
            h.breaker.failure(self.clock())
            raise deadline_exceeded(req.timeout, info.attempts) from None
        except BaseException:
            h.inflight -= 1
            h.breaker.release()
            await gen.aclose()
            raise
        h.breaker.success()
        h.observe(self.clock() - start)
        return gen, first

    @staticmethod
    def _open(target: Target, req: CanonicalRequest, route: Route) -> AsyncIterator[Chunk]:
        backend = target.backend
        um = route.upstream_model
        call: Callable[[CanonicalRequest], AsyncIterator[Chunk]] = (
            (lambda r: backend.generate(r, um)) if um else backend.generate)
        if needs_fanout(req, target.caps):
            return fan_out(call, req, target.caps)
        return call(req)

    # -- choosing ----------------------------------------------------------------------------

    async def _pick(self, route: Route, tried: list[Target], now: float,
                    info: RunInfo) -> tuple[Target | None, bool]:
        """A deployment to try, and whether the usage strategy found every one at its limit."""
        cands = [t for t in route.targets if t.backend.ready and t.health.breaker.allows(now)]
        if tried and len(cands) > 1:
            fresh = [t for t in cands if t not in tried]
            cands = fresh or cands
        if not cands:
            return None, False
        strategy = route.model.strategy
        if strategy != "usage":
            return PICKERS[strategy](cands, self.rng), False
        prompt = info.prompt_tokens or 0
        counts = await self.counters.read([t.name for t in cands])
        t = by_usage(cands, counts, self.rng, prompt)
        if t is None:
            return None, True
        await self.counters.add(t.name, 1, prompt)
        return t, False

    @staticmethod
    def _soonest(route: Route, now: float) -> float | None:
        waits = [t.health.breaker.retry_in(now) for t in route.targets if t.backend.ready]
        return min(waits) if waits else None

    # -- fallbacks ---------------------------------------------------------------------------

    def _need(self, req: CanonicalRequest, route: Route, info: RunInfo) -> int:
        if info.prompt_tokens is None:
            from policies.tokens import count_prompt_tokens

            info.prompt_tokens = count_prompt_tokens(req, route.model)
        return info.prompt_tokens + max(req.max_tokens or 0, 0)

    def _fit(self, req: CanonicalRequest, route: Route, info: RunInfo) -> Route:
        """The prompt does not fit the group's window: go straight to its ``context_fallback``."""
        seen = {route.group}
        while route.model.context_window is not None:
            need = self._need(req, route, info)
            window = route.model.context_window
            if need <= window:
                break
            nxt = route.model.context_fallback
            if nxt is None or nxt in seen:
                raise InvalidRequest(
                    f"model {route.group} has a context window of {window} tokens; the request needs "
                    f"{need} ({info.prompt_tokens} in the prompt, {need - (info.prompt_tokens or 0)} "
                    "for the completion)", param="max_tokens" if req.max_tokens else "prompt")
            route = self.resolve(nxt)
            seen.add(route.group)
        return route

    def _chain(self, req: CanonicalRequest, route: Route, info: RunInfo) -> Iterator[Route]:
        """The route itself, then its group's fallbacks that fit the prompt (not for pinned routes)."""
        yield route
        if route.pinned:
            return
        for name in route.model.fallbacks:
            r = self.resolve(name)
            window = r.model.context_window
            if window is None or self._need(req, r, info) <= window:
                yield r

    def _none_available(self, req: CanonicalRequest, route: Route, info: RunInfo,
                        saturated: bool) -> GatewayError:
        now = self.clock()
        routes = list(self._chain(req, route, info))
        if saturated:
            secs = max(1, math.ceil(60 - time.time() % 60))
            return RateLimited(f"every deployment of model {route.group} is at its own rate limit",
                               headers={"retry-after": str(secs)})
        ready = [t for r in routes for t in r.targets if t.backend.ready]
        if not ready:
            return Unavailable(f"model {route.group} is loading", headers={"retry-after": "5"})
        wait = min(t.health.breaker.retry_in(now) for t in ready)
        return Unavailable(f"every deployment of model {route.group} is cooling down after failures",
                           headers={"retry-after": str(max(1, math.ceil(wait)))})

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        for t in self.targets:
            await t.backend.start()

    async def aclose(self) -> None:
        for t in self.targets:
            await t.backend.aclose()

    @property
    def ready(self) -> bool:
        return all(t.backend.ready for t in self.targets)


__all__ = ["Health", "Route", "Router", "RunInfo", "Target"]
