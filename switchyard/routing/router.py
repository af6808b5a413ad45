"""The router: pick a deployment, run the request on it, and keep the model name's promise when
deployments are slow, failing or rate-limited.

Per request: fit the context window (maybe switching to ``context_fallback``; all of it in
``window.Fitter``), then for the group
and each of its ``fallbacks`` in turn, up to ``1 + retries`` attempts (healthy deployments first,
fresh ones first; re-trying one already tried waits a jittered backoff), all inside the request's
deadline. Only failures the error declares ``retryable`` are retried, and only before the first
chunk: once a chunk went out, an error propagates as is. A failure counts against a deployment's
health only when the error says it is the deployment's fault, and once per request.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from switchyard.core.backend import Backend
from switchyard.core.canonical import CanonicalRequest, Chunk, replace
from switchyard.core.config import Config
from switchyard.core.errors import GatewayError, RateLimited, Unavailable, UpstreamError
from switchyard.core.logs import Throttled
from switchyard.core.propagation import OUTGOING, REQUEST_ID
from switchyard.policies.tokens import encoding, encodings_of
from switchyard.routing.fanout import fan_out, needs_fanout
from switchyard.routing.health import OPEN, Health
from switchyard.routing.resolve import Resolver, Route, RunInfo, Target
from switchyard.routing.retry import PATIENCE, backoff, deadline_exceeded, retry_after_header
from switchyard.routing.strategies import PICKERS, by_usage
from switchyard.routing.usage import Counters, LocalCounters, counters_for
from switchyard.routing.window import Fitter

if TYPE_CHECKING:
    from switchyard.policies.store import Store

Attempt = tuple[AsyncGenerator[Chunk, None], Chunk | None]
log = logging.getLogger("switchyard.router")
# An upstream that keeps failing is logged once per deployment every 10 s, with a count.
FAILURES = Throttled(log, 10.0)


class Router:
    def __init__(self, config: Config, backends: dict[str, Backend] | None = None, *,
                 rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """``backends`` maps ``group/deployment`` to a ready-made backend (tests); the rest are
        built from the config. ``rng`` and ``clock`` are injectable for tests."""
        self.config = config
        self.rc = config.router
        self.resolver = Resolver(config, self.rc, backends)
        self.fitter = Fitter(self.resolve)
        self.rng = rng or random.Random()
        self.clock = clock
        self.counters: Counters = LocalCounters()
        self._announcer: asyncio.Task[None] | None = None
        self._handed: set[int] = set()  # ids of backends a reload passed on (see ``hand_on``)

    def use_store(self, store: Store) -> None:
        """Count per-deployment usage (the ``usage`` strategy) where the policy store lives."""
        self.counters = counters_for(store)

    @property
    def targets(self) -> list[Target]:
        return [t for ts in self.resolver.targets.values() for t in ts]

    def resolve(self, name: str) -> Route:
        return self.resolver.resolve(name)

    def default(self, kind: str) -> Route:
        """The route of a request of ``kind`` that names no model (``Resolver.default``)."""
        return self.resolver.default(kind)

    # -- running a request -------------------------------------------------------------------

    async def stream(self, req: CanonicalRequest, route: Route, info: RunInfo) -> AsyncGenerator[Chunk, None]:
        """Run ``req`` on a deployment of ``route`` (or a fallback); yield its chunks."""
        deadline = self.clock() + req.timeout if req.timeout else None
        asked = route.group
        try:
            route, req = self.fitter.fit(req, route, info)
            target, served, (gen, first) = await self._first_fitted(req, route, asked, info, deadline)
        except BaseException:
            if info.upstream_start is not None:
                info.upstream_end = time.monotonic()
            raise
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
            if e.deployment_fault:  # the deployment broke off mid-answer
                self._blame(target, e, True)
            if info.spans is not None:
                info.spans.end(e)
            raise
        finally:
            info.upstream_end = time.monotonic()
            if info.spans is not None:
                info.spans.end()
            h.inflight -= 1
            await gen.aclose()
            if count and tokens:
                await self.counters.add(target.name, 0, tokens)

    async def _first_fitted(self, req: CanonicalRequest, route: Route, asked: str, info: RunInfo,
                            deadline: float | None) -> tuple[Target, Route, Attempt]:
        """``_first``, and once more fitted to the window the upstream's own overflow error
        states, where the caller's policy truncates and no window is configured (window.py)."""
        req, policy = await self.fitter.fit_reported(req, route, info)
        try:
            return await self._first(req, route, asked, info, deadline)
        except UpstreamError as e:
            fitted = self.fitter.refit(req, route, policy, e)
            if fitted is None:
                raise
            return await self._first(fitted, route, asked, info, deadline)

    async def _first(self, req: CanonicalRequest, route: Route, asked: str, info: RunInfo,
                     deadline: float | None) -> tuple[Target, Route, Attempt]:
        """Attempts until one yields its first chunk (or ends cleanly); raises when none can."""
        rc = self.rc
        last: GatewayError | None = None
        saturated = False
        blamed: set[Target] = set()  # deployments this request already counted a failure against
        waits: dict[Target, float] = {}  # a deployment's own Retry-After, seconds
        for r in self._chain(req, route, info):
            tried: list[Target] = []
            budget = 1 + rc.retries
            while budget > 0:
                now = self.clock()
                if deadline is not None and now >= deadline:
                    raise deadline_exceeded(req.timeout, info.attempts, last)
                target, full = await self._pick(r, tried, now, info)
                saturated |= full
                if target is None:
                    break
                if target in tried:
                    # Again on a deployment this request tried, none other left to take it: as
                    # the vendors' SDKs retry a throttle, after a jittered exponential backoff,
                    # or the upstream's own Retry-After when longer. Its breaker's cooldown
                    # sheds load to siblings; with none left it does not hold the retry.
                    pause = max(waits.get(target, 0.0), backoff(rc, len(tried), self.rng))
                    if pause > (deadline - now if deadline is not None else PATIENCE):
                        break  # longer than the request may wait: the fallbacks, or the last error
                    await asyncio.sleep(pause)
                budget -= 1
                tried.append(target)
                info.attempts += 1
                info.tried.append(target.name)
                info.deployment = target.name
                info.fallback = r.group if r.group != asked else None
                out = await self._try(target, req, r, info, deadline, blamed)
                if not isinstance(out, GatewayError):
                    return target, r, out
                if not out.retryable:
                    raise out
                last = out
                if out.retry_after is not None:  # what this deployment asked us to wait
                    waits[target] = min(out.retry_after, rc.retry_after_max)
        if last is not None:
            raise retry_after_header(last, rc.retry_after_max)
        raise self._none_available(route, saturated)

    async def _try(self, target: Target, req: CanonicalRequest, route: Route, info: RunInfo,
                   deadline: float | None, blamed: set[Target]) -> Attempt | GatewayError:
        """One attempt, up to its first chunk. A failure is returned, not raised."""
        h = target.health
        start = self.clock()
        h.breaker.acquire(start)
        h.inflight += 1
        if info.upstream_start is None:
            info.upstream_start = time.monotonic()
        if info.spans is not None:
            info.spans.start(target.name)
        if info.upstream_id:
            OUTGOING.set({**(OUTGOING.get() or {}), REQUEST_ID: info.attempt_id()})
        gen: AsyncGenerator[Chunk, None] | None = None
        try:
            if deadline is None:
                gen = self._open(target, req, route)
                first = await anext(gen)
            else:
                # A backend's own timeout ends with the request's: it sees the time left.
                left = replace(req, timeout=deadline - start)
                async with asyncio.timeout(deadline - start):
                    gen = self._open(target, left, route)
                    first = await anext(gen)
        except StopAsyncIteration:
            first = None
        except BaseException as e:  # one ending for every failed attempt
            h.inflight -= 1
            if info.spans is not None:
                info.spans.end(e)
            if gen is not None:
                await gen.aclose()
            if isinstance(e, GatewayError) and e.deployment_fault:
                # A failure is slow news too (the latency strategy), but no answer (the console).
                h.observe(self.clock() - start, answered=False)
                self._blame(target, e, target not in blamed)
                blamed.add(target)
            else:
                # No verdict on the deployment: the caller's fault, the caller's deadline (a
                # deployment's own timeout is an UpstreamError), or the caller left.
                h.breaker.release()
            if isinstance(e, GatewayError):
                return e
            if isinstance(e, TimeoutError):
                raise deadline_exceeded(req.timeout, info.attempts, target.name) from None
            raise
        assert gen is not None  # opened before its first chunk was asked for
        h.breaker.success()
        h.observe(self.clock() - start)
        return gen, first

    def _blame(self, target: Target, e: GatewayError, count: bool) -> None:
        """Count a failure against ``target``'s health; log it (at most once per deployment per
        ``FAILURES``' interval) and the breaker opening."""
        breaker = target.health.breaker
        was_open = breaker.state == OPEN
        hold = min(e.retry_after, self.rc.retry_after_max) if e.retry_after is not None else None
        breaker.failure(self.clock(), hold, count=count)
        target.health.note_error(e.status, e.message)
        FAILURES.warning(target.name, "deployment %s failed: %s", target.name, e.message)
        if breaker.state == OPEN and not was_open:
            log.warning("circuit breaker for %s opened for %.1f s (%d consecutive failures; last: %s)",
                        target.name, breaker.retry_in(self.clock()), breaker.failures, e.message)

    @staticmethod
    def _open(target: Target, req: CanonicalRequest, route: Route) -> AsyncGenerator[Chunk, None]:
        backend = target.backend
        um = route.upstream_model
        call: Callable[[CanonicalRequest], AsyncGenerator[Chunk, None]] = (
            (lambda r: backend.generate(r, um)) if um else backend.generate)
        if needs_fanout(req, target.caps):
            return fan_out(call, req, target.caps)
        return call(req)

    def reset(self, name: str) -> Target | None:
        """Close the breaker of deployment ``name`` (``group/deployment``); None if there is none."""
        for t in self.targets:
            if t.name == name:
                t.health.breaker.reset()
                log.warning("circuit breaker for %s closed by an operator", name)
                return t
        return None

    # -- choosing ----------------------------------------------------------------------------

    async def _pick(self, route: Route, tried: list[Target], now: float,
                    info: RunInfo) -> tuple[Target | None, bool]:
        """A deployment to try, and whether the usage strategy found every one at its limit.

        Healthy deployments (breaker closed, or due for its probe) first: an open breaker sheds
        load to those. When none is healthy, every ready deployment stays a candidate: the last
        ones are never taken out of rotation (each request probes them)."""
        cands = [t for t in route.targets if t.backend.ready and t.health.breaker.allows(now)]
        if not cands:
            cands = [t for t in route.targets if t.backend.ready]
            if not cands:
                return None, False
        if tried and len(cands) > 1:
            fresh = [t for t in cands if t not in tried]
            cands = fresh or cands
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

    # -- fallbacks ---------------------------------------------------------------------------

    def _chain(self, req: CanonicalRequest, route: Route, info: RunInfo) -> Iterable[Route]:
        """The route itself, then its group's fallbacks that fit the prompt (not for pinned routes).
        Without any, a tuple: a generator left unfinished (the first route served) is closed by
        raising GeneratorExit in it, 0.65 us a request."""
        if route.pinned or not route.model.fallbacks:
            return (route,)
        return self._with_fallbacks(req, route, info)

    def _with_fallbacks(self, req: CanonicalRequest, route: Route, info: RunInfo) -> Iterator[Route]:
        yield route
        for name in route.model.fallbacks:
            r = self.resolve(name)
            window = r.model.context_window
            if window is None or self.fitter.need(req, r, info) <= window:
                yield r

    def _none_available(self, route: Route, saturated: bool) -> GatewayError:
        """No attempt was made: every deployment is at its own rate limit, or none is ready."""
        if saturated:
            secs = max(1, math.ceil(60 - time.time() % 60))
            return RateLimited(f"every deployment of model {route.group} is at its own rate limit",
                               headers={"retry-after": str(secs)})
        failed = [why for t in self.resolver.targets.get(route.group, ()) if (why := self.load_error(t))]
        if failed:  # for good: not "loading", which would have a caller wait forever
            return Unavailable(f"model {route.group} failed to load ({failed[0]})")
        return Unavailable(f"model {route.group} is loading", headers={"retry-after": "5"})

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the tokenizers prompts are counted with (tiktoken takes 0.6-2 s a file: not on
        a first request), start every backend, and log each model once it is ready."""
        started = time.monotonic()
        names = {n for m in self.config.models for n in encodings_of(m)}
        if names:
            await asyncio.to_thread(lambda: [encoding(n) for n in sorted(names)])
        for t in self.targets:
            await t.backend.start()
        self._announcer = asyncio.create_task(self._announce(started), name="router:ready")

    async def _announce(self, started: float) -> None:
        """One "model ready" line per model, with the seconds it took (an engine loads in the
        background); ends when every model is ready or one failed to load."""
        waiting = dict(self.resolver.targets)
        while waiting:
            for name, targets in list(waiting.items()):
                if all(t.backend.ready for t in targets):
                    del waiting[name]
                    log.info("model ready", extra={"fields": {
                        "model": name, "seconds": round(time.monotonic() - started, 3),
                        "deployments": [t.deployment.name for t in targets]}})
                elif any(self.load_error(t) for t in targets):
                    del waiting[name]  # the backend logged why; it stays not ready
            if waiting:
                await asyncio.sleep(0.05)

    def hand_on(self, config: Config) -> dict[str, Backend]:
        """The backends (pools, loaded engines) of deployments that ``config`` keeps exactly as
        they are, keyed ``group/deployment`` for the next Router; this one no longer closes them."""
        models = {m.name: m for m in config.models}
        kept: dict[str, Backend] = {}
        for t in self.targets:
            m = models.get(t.model.name)
            if m is not None and t.deployment in m.deployments:
                kept[f"{m.name}/{t.deployment.name}"] = t.backend
        self._handed.update(id(b) for b in kept.values())
        return kept

    def take_back(self, backends: dict[str, Backend]) -> None:
        """Undo ``hand_on`` (the next config could not be started)."""
        self._handed.difference_update(id(b) for b in backends.values())

    async def aclose(self) -> None:
        if self._announcer is not None:
            self._announcer.cancel()
        for t in self.targets:
            if id(t.backend) not in self._handed:
                await t.backend.aclose()

    @property
    def ready(self) -> bool:
        return all(t.backend.ready for t in self.targets)

    @staticmethod
    def load_error(t: Target) -> str | None:
        """Why ``t``'s model failed to load for good (None: loading, ready, or nothing to load)."""
        return t.backend.load_error


__all__ = ["Health", "Route", "Router", "RunInfo", "Target"]
