"""The Policy: admit a request against every limit in one store call, settle it exactly once.

Order for the gateway: ``keys.lookup`` -> ``count_prompt_tokens`` -> ``policy.admit`` (429 / 503
raised here) -> call the backend -> ``policy.settle`` in a ``finally`` with whatever was produced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from switchyard.core.deployments import DEFAULT_OUTPUT_TOKENS
from switchyard.core.errors import Forbidden, RateLimited, Unavailable
from switchyard.core.ids import hex_id
from switchyard.core.settings import Limits, Price
from switchyard.core.tasks import stop
from switchyard.policies.attribution import NONE, Attribution
from switchyard.policies.base import Outcome, Principal, Ticket
from switchyard.policies.memory import MemoryStore
from switchyard.policies.plan import LIFETIME, NANO, Plan, attribution_scopes, build_plan, with_scopes
from switchyard.policies.pricing import Pricing, nano_usd
from switchyard.policies.store import Admission, Store, StoreDown, UsageRecord

log = logging.getLogger("switchyard.policies")

# Completion tokens per choice reserved, and sent upstream as max_tokens, when the caller set no
# bound (max_tokens None or -1) and neither the model (core.deployments.default_output_tokens)
# nor its window says otherwise.
DEFAULT_COMPLETION_RESERVE = DEFAULT_OUTPUT_TOKENS
# The smallest max_tokens a request is shrunk to (per choice) before it is refused instead.
MIN_SHRUNK_TOKENS = 16
QUOTAS = frozenset({"tokens_per_day", "tokens_per_month", "spend_per_day", "spend_per_month"})
LOWERED_HEADER = "x-switchyard-max-tokens-lowered"
_WHAT = {
    "rpm": "requests per minute limit {limit} reached",
    "tpm": "tokens per minute limit {limit} reached (this request reserves {reserve} tokens)",
    "too_large": "request reserves {reserve} tokens (prompt + max_tokens), more than the tokens per "
                 "minute limit {limit}; lower max_tokens",
    "concurrency": "concurrent requests limit {limit} reached",
    "tokens_per_day": "daily token quota {limit} reached",
    "tokens_per_month": "monthly token quota {limit} reached",
    "spend_per_day": "daily spend quota ${usd} reached",
    "spend_per_month": "monthly spend quota ${usd} reached",
    "tokens_per_session": "token quota {limit} per session reached",
    "spend_per_session": "spend quota ${usd} per session reached",
}
# A lifetime scope's (a session's) quotas are its month ones (plan.LIFETIME).
_LIFETIME_KIND = {"tokens_per_month": "tokens_per_session", "spend_per_month": "spend_per_session"}


def _per_session(lim: Limits) -> bool:
    return lim.tokens_per_session is not None or lim.spend_per_session is not None


def shrinks(p: Principal) -> bool:
    """Whether a request that a quota cannot hold whole gets a lower max_tokens (the key's
    setting, else its team's; on unless set off)."""
    for lim in (p.key_limits, p.team_limits):
        if lim.shrink_max_tokens is not None:
            return lim.shrink_max_tokens
    return True


def duration(ms: int) -> str:
    """OpenAI's reset format: "20ms", "1s", "1.5s", "6m0s"."""
    if ms < 1000:
        return f"{max(ms, 0)}ms"
    m, s = divmod(ms / 1000, 60)
    secs = f"{s:.3f}".rstrip("0").rstrip(".")
    return f"{int(m)}m{secs}s" if m else f"{secs}s"


def ratelimit_headers(adm: Admission) -> dict[str, str]:
    h: dict[str, str] = {}
    if adm.req is not None:
        lim, rem, reset = adm.req
        h["x-ratelimit-limit-requests"] = str(lim)
        h["x-ratelimit-remaining-requests"] = str(rem)
        h["x-ratelimit-reset-requests"] = duration(reset)
    if adm.tok is not None:
        lim, rem, reset = adm.tok
        h["x-ratelimit-limit-tokens"] = str(lim)
        h["x-ratelimit-remaining-tokens"] = str(rem)
        h["x-ratelimit-reset-tokens"] = duration(reset)
    return h


def _since(state: tuple[int, int, int] | None, then_ms: int, now_ms: int) -> tuple[int, int, int] | None:
    """A per-minute limit's (limit, remaining, reset ms) seen at ``then_ms``, at ``now_ms``: the
    bucket refills evenly over the minute (GCRA)."""
    if state is None:
        return None
    limit, remaining, reset = state
    elapsed = max(now_ms - then_ms, 0)
    if elapsed >= reset:
        return limit, limit, 0
    return limit, min(limit, remaining + elapsed * limit // 60_000), reset - elapsed


class Limiter:
    """``Policy`` over a shared store, with an in-process fallback for fail-open deployments."""

    def __init__(self, store: Store, pricing: Pricing, *, fallback: MemoryStore | None = None,
                 lease_ttl_ms: int = 60_000, down_for: float = 1.0, max_backlog: int = 100_000) -> None:
        self.store = store
        self.pricing = pricing
        self.fallback = fallback if fallback is not None else MemoryStore(ns=store.ns)
        self.lease_ttl_ms = lease_ttl_ms
        self.down_for = down_for  # after a failure, go straight to the fallback for this long
        self._down_until = 0.0
        self.outage = False  # the store failed and has not answered since (logged once each way)
        self._plans: dict[tuple[str, str], tuple[Principal, Plan]] = {}
        # The per-minute limits as this replica last admitted against them, per (key, model): a
        # 429 states the limits that did not refuse from here (OpenAI sends all six headers).
        self._seen: dict[tuple[str, str], Admission] = {}
        self._live: dict[str, Ticket] = {}  # lease id -> ticket, for renewal
        # Tickets holding a quota reservation in the shared store: renewed with the leases, so
        # that only a dead replica's are reaped (store.reap, run by ``_reap_loop``).
        self._held: dict[str, Ticket] = {}
        self.teams: Callable[[], Awaitable[list[str]]] | None = None  # whose reservations to reap
        self._reaper: asyncio.Task[None] | None = None
        # Store calls to replay once it answers (settlements, cancelled admissions), in order.
        self._backlog: deque[Callable[[], Awaitable[None]]] = deque(maxlen=max_backlog)
        # Settlements on the wire, their replies awaited in order by one task (``_drain``): a task
        # per settlement cost more than the rest of settling.
        self._settling: deque[tuple[Awaitable[None], dict[str, Any]]] = deque()
        self._drainer: asyncio.Task[None] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._reconciler: asyncio.Task[None] | None = None

    def plan_for(self, p: Principal, model: str) -> Plan:
        hit = self._plans.get((p.key_id, model))
        if hit is not None and (hit[0] is p or hit[0] == p):
            return hit[1]
        plan = build_plan(self.store.ns, p.key_id, p.team, model, p.key_limits, p.team_limits,
                          p.team_model_limits)
        if len(self._plans) > 50_000:
            self._plans.clear()
        self._plans[(p.key_id, model)] = (p, plan)
        return plan

    @property
    def store_down(self) -> bool:
        return time.monotonic() < self._down_until

    def _mark_down(self, err: BaseException) -> None:
        if not self.outage:  # once per outage, not once per request (or per retry)
            self.outage = True
            log.error("policy store unavailable: %s", err)
        self._down_until = time.monotonic() + self.down_for

    def _mark_up(self) -> None:
        if self.outage:
            self.outage = False
            log.warning("policy store reachable again")

    async def admit(self, principal: Principal, model: str, *, prompt_tokens: int, max_tokens: int | None,
                    fail_open: bool = False, group: str | None = None, choices: int = 1,
                    upstream_model: str | None = None, attribution: Attribution = NONE) -> Ticket:
        if not principal.may_use(model):
            raise Forbidden(f"key {principal.key_id} may not use model {model}", param="model")
        plan = self.plan_for(principal, model)
        p, a = principal, attribution
        if a is not NONE and (p.team_tag_limits or p.team_end_user_limits is not None or (a.session and (
                _per_session(p.key_limits) or _per_session(p.team_limits)))):
            # its session's, end user's and tags' budgets, checked in the same call
            extra = attribution_scopes(self.store.ns, p.key_id, p.team, a.tags, a.end_user, a.session,
                                       p.key_limits, p.team_limits, p.team_end_user_limits, p.team_tag_limits)
            if extra:
                plan = with_scopes(plan, extra)
        prices = self.pricing.route(group or model, upstream_model)
        if plan.has_spend and not prices.complete:
            # Counted as $0 it would pass every spend quota: refused instead (a config cannot
            # name it when it came from the admin API, or from a vendor/* route's caller).
            e = Forbidden(f"model {model} has no price ({prices.why}), and a spend quota of key "
                          f"{principal.key_id} or its team counts every request in USD", param="model")
            e.reason = "unpriced"
            raise e
        price = prices.reserve
        per_choice = max_tokens if max_tokens is not None and max_tokens >= 0 else DEFAULT_COMPLETION_RESERVE
        asked = per_choice
        ticket_id = hex_id(9)
        lease = ticket_id if plan.has_concurrency else None
        local = False
        # A quota that cannot hold the worst case may still buy a shorter answer: admit that one
        # (each try writes nothing unless it admits; one try per scope that can refuse).
        for _ in range(len(plan.scopes) + 1):
            reserve = prompt_tokens + per_choice * choices
            spend = nano_usd(price, prompt_tokens, per_choice * choices)
            if not plan.has_limits:
                adm = Admission(True, time.time_ns() // 1_000_000)
            elif self.store_down:
                adm, local = await self._degraded(plan, reserve, spend, lease, fail_open, None)
            else:
                adm, local = await self._admit_shared(plan, reserve, spend, lease, ticket_id, fail_open)
            if adm.ok:
                break
            fits = self._shrunk(adm, price, prompt_tokens, choices, per_choice)
            if fits is None or not shrinks(principal):
                break
            per_choice = fits
        if not adm.ok and adm.kind == "cancelled":  # this very ticket was given up on meanwhile
            raise Unavailable("the policy store answered too late; try again", headers={"Retry-After": "1"})
        if not adm.ok:
            raise self._refusal(plan, adm, reserve, self._seen.get((plan.key_id, plan.model)))
        if adm.req is not None or adm.tok is not None:
            if len(self._seen) > 50_000:
                self._seen.clear()
            self._seen[(plan.key_id, plan.model)] = adm
        headers = ratelimit_headers(adm)
        if per_choice != asked:
            headers[LOWERED_HEADER] = str(per_choice)
        # By position, in the field order (principal ... attribution): by keyword 2.6 us, by
        # position 0.9. test_a_ticket_says_every_field_of_its_admission checks each lands in place.
        t = Ticket(principal, model, reserve, ticket_id, group or model, headers, lease, time.monotonic(),
                   False, prompt_tokens, spend, adm.now_ms, plan, local, per_choice, per_choice != asked,
                   prices, attribution)
        if lease is not None:
            self._live[lease] = t
        if plan.has_quota and not local:
            self._held[ticket_id] = t
        if (lease is not None or plan.has_quota) and (self._renewer is None or self._renewer.done()):
            self._renewer = asyncio.create_task(self._renew_loop())
        return t

    async def _admit_shared(self, plan: Plan, reserve: int, spend: int, lease: str | None, ticket_id: str,
                            fail_open: bool) -> tuple[Admission, bool]:
        try:
            adm = await self.store.admit(plan, tokens=reserve, spend=spend, lease_id=lease,
                                         lease_ttl_ms=self.lease_ttl_ms, ticket=ticket_id)
            if self.outage:
                self._mark_up()
            return adm, False
        except StoreDown as e:
            self._mark_down(e)
            # It may still run when the store wakes up (a stall, not an outage): undo it then.
            self._queue(lambda: self.store.cancel(plan, ticket=ticket_id, tokens=reserve, spend=spend,
                                                  lease_id=lease))
            return await self._degraded(plan, reserve, spend, lease, fail_open, e)

    @staticmethod
    def _shrunk(adm: Admission, price: Price, prompt: int, choices: int, per_choice: int) -> int | None:
        """The largest max_tokens per choice (at least MIN_SHRUNK_TOKENS, below ``per_choice``)
        that what the refusing quota has left pays for; None: refuse."""
        if adm.kind not in QUOTAS or adm.remaining < 0:
            return None
        if adm.kind.startswith("tokens"):
            fits = (adm.remaining - prompt) // choices
        else:
            # nano-USD per completion token (the tier the prompt falls in; a tier never lowers it)
            per_token = price.rates(prompt).completion_per_1m * 1000
            if per_token <= 0:
                return None
            fits = int((adm.remaining - nano_usd(price, prompt, 0)) // (per_token * choices))
            # nano_usd rounds the sum: step down until it is within the remainder (a step or two).
            for _ in range(4):
                if fits < 1 or nano_usd(price, prompt, fits * choices) <= adm.remaining:
                    break
                fits -= 1
        fits = min(fits, per_choice - 1)
        return fits if fits >= min(MIN_SHRUNK_TOKENS, per_choice - 1) and fits >= 1 else None

    async def _degraded(self, plan: Plan, reserve: int, spend: int, lease: str | None, fail_open: bool,
                        err: BaseException | None) -> tuple[Admission, bool]:
        if not fail_open:
            raise Unavailable("the policy store is unavailable; try again shortly",
                              headers={"Retry-After": "1"}) from err
        # Serve, counting against this replica's own copy of the limits; reconciled later.
        adm = await self.fallback.admit(plan, tokens=reserve, spend=spend, lease_id=lease,
                                        lease_ttl_ms=self.lease_ttl_ms, ticket=lease or "")
        return adm, True

    @staticmethod
    def _refusal(plan: Plan, adm: Admission, reserve: int, seen: Admission | None) -> RateLimited:
        scope = plan.scopes[adm.scope]
        kind = _LIFETIME_KIND.get(adm.kind, adm.kind) if scope.vector[3] == LIFETIME else adm.kind
        what = _WHAT[kind].format(limit=adm.limit, reserve=reserve,
                                  usd=f"{adm.limit / NANO:g}")
        secs = max(1, math.ceil(adm.retry_ms / 1000))
        tail = "" if kind in ("too_large", *_LIFETIME_KIND.values()) else f"; retry in {secs} s"
        # A session's budget never comes back: no Retry-After to wait for.
        headers = {} if kind in _LIFETIME_KIND.values() else {"Retry-After": str(secs)}
        # As OpenAI does on its 429s: the limit that refused, nothing left, and when it resets;
        # the other per-minute limit as last admitted here, replenished since.
        req = _since(seen.req, seen.now_ms, adm.now_ms) if seen is not None else None
        tok = _since(seen.tok, seen.now_ms, adm.now_ms) if seen is not None else None
        if adm.kind == "rpm":
            req = (adm.limit, 0, adm.retry_ms)
        elif adm.kind in ("tpm", "too_large"):
            tok = (adm.limit, 0, adm.retry_ms)
        headers.update(ratelimit_headers(Admission(False, adm.now_ms, req=req, tok=tok)))
        e = RateLimited(f"{scope.label}: {what}{tail}", headers=headers)
        e.limit = kind
        e.scope = ("model" if " model " in scope.label else "end_user" if scope.label.startswith("end user ")
                   else scope.label.split(" ")[0])
        return e

    async def settle(self, ticket: Ticket, outcome: Outcome) -> None:
        """Never raises: a store failure queues the settlement for replay."""
        if ticket.settled:
            return
        ticket.settled = True
        if ticket.lease_id is not None:
            self._live.pop(ticket.lease_id, None)
        self._held.pop(ticket.id, None)
        plan: Plan = ticket.plan
        usage = outcome.usage
        priced = ticket.prices.cost(outcome.deployment, usage) if ticket.prices is not None else 0
        if outcome.cache_hit:
            priced = 0  # nothing was called: nothing to price
        cost = ticket.cost_nano = priced or 0
        ticket.unpriced = priced is None
        # By position, in the field order (ts_ms ... guardrails): a call by keyword costs 2.4 us
        # against 0.6. test_a_record_says_every_field_of_its_settlement checks each lands in place.
        att = ticket.attribution
        rec = UsageRecord(ticket.admitted_ms, ticket.principal.key_id, plan.team,
                          ticket.group or ticket.model, outcome.deployment, usage.prompt_tokens,
                          usage.completion_tokens, usage.cached_tokens, cost, outcome.status,
                          round(outcome.latency_ms, 3), outcome.request_id, ticket.id, outcome.endpoint,
                          outcome.dialect, outcome.requested_model, outcome.attempts,
                          round(outcome.ttfb_ms, 3), outcome.cut, outcome.reason, usage.cache_write_tokens,
                          priced is None, ",".join(att.tags), att.end_user, att.session, outcome.guardrails)
        if outcome.cache_hit and outcome.saved is not None:
            rec.cache_hit, rec.saved_tokens = True, outcome.saved.total_tokens
            # at the route's own price (""): which deployment gave the original answer is not kept
            saved = ticket.prices.cost("", outcome.saved) if ticket.prices is not None else 0
            rec.saved_nano = ticket.saved_nano = saved or 0
        kw: dict[str, Any] = dict(plan=plan, admitted_ms=ticket.admitted_ms,
                                  token_delta=usage.total_tokens - ticket.reserved_tokens,
                                  spend_delta=cost - ticket.reserved_spend, lease_id=ticket.lease_id,
                                  record=rec, refund_request=not outcome.called)
        if ticket.local:
            await self.fallback.settle(**kw)
            # The shared store never saw the reservation: add the real usage once it is back.
            replay = dict(kw, token_delta=usage.total_tokens, spend_delta=cost, lease_id=None,
                          rates=False, refund_request=False)
            self._queue(lambda: self.store.settle(**replay))
            return
        # Off the critical path once the command is on the wire (this replica's next admissions
        # queue behind it on the same connection): its reply is awaited by the drainer, which
        # handles failure as above; aclose waits for it. Not sent yet (no connection): the whole
        # call is awaited here.
        try:
            sent, pending = self.store.settle_nowait(**kw)
        except Exception:
            log.exception("settle failed")
            return
        if pending is None:
            return
        if not sent:
            await self._settle_store(pending, kw)
            return
        self._settling.append((pending, kw))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        """Await the settlements on the wire one after another: replies come in the order they
        were sent, so this task waits once per burst, not once per settlement."""
        while self._settling:
            await self._settle_store(*self._settling.popleft())

    async def _settle_store(self, pending: Awaitable[None], kw: dict[str, Any]) -> None:
        try:
            await pending
        except StoreDown as e:
            self._mark_down(e)
            self._queue(lambda: self.store.settle(**kw))
        except Exception:  # a bug must not turn a served request into a 500
            log.exception("settle failed")

    async def flush(self) -> None:
        """Wait for settlements still in flight (shutdown, tests)."""
        while self._drainer is not None and not self._drainer.done():
            await asyncio.shield(self._drainer)

    def _queue(self, op: Callable[[], Awaitable[None]]) -> None:
        """Run ``op`` against the store once it answers again, in order with the others."""
        self._backlog.append(op)
        if self._reconciler is None or self._reconciler.done():
            self._reconciler = asyncio.create_task(self._reconcile_loop())

    async def _reconcile_loop(self) -> None:
        while self._backlog:
            await asyncio.sleep(self.down_for / 2)
            try:
                await self.store.ping()
                while self._backlog:
                    await self._backlog[0]()
                    self._backlog.popleft()
                self._down_until = 0.0
                self._mark_up()
                log.info("usage kept while the policy store was down is reconciled")
            except StoreDown:
                continue
            except Exception:
                log.exception("reconcile failed; dropping one settlement")
                self._backlog.popleft()

    async def _renew_loop(self) -> None:
        while self._live or self._held:
            await asyncio.sleep(self.lease_ttl_ms / 3000)
            shared = [(t.plan, t.lease_id) for t in self._live.values() if not t.local]
            local = [(t.plan, t.lease_id) for t in self._live.values() if t.local]
            held = [(t.plan, t.id) for t in self._held.values()]
            with contextlib.suppress(StoreDown):
                if shared or held:
                    await self.store.renew(shared, self.lease_ttl_ms, held)  # type: ignore[arg-type]  # live tickets have lease ids
            if local:
                await self.fallback.renew(local, self.lease_ttl_ms)  # type: ignore[arg-type]  # live tickets have lease ids

    def start(self) -> None:
        """Reap, now and every third of the lease ttl, the quota reservations of admissions whose
        replica died before settling them (its own are renewed meanwhile, so never reaped)."""
        if self.teams is not None and (self._reaper is None or self._reaper.done()):
            self._reaper = asyncio.create_task(self._reap_loop())

    async def _reap_loop(self) -> None:
        assert self.teams is not None
        while True:
            try:
                for team in await self.teams():
                    n = await self.store.reap(team)
                    if n:
                        log.warning("gave back the quota reservations of %d request(s) of team %s whose "
                                    "replica stopped before settling them", n, team)
            except StoreDown:
                pass  # the store's outage is logged where it is noticed
            except Exception:
                log.exception("reaping reservations failed")
            await asyncio.sleep(self.lease_ttl_ms / 3000)

    @property
    def backlog(self) -> int:
        return len(self._backlog)

    async def aclose(self) -> None:
        await self.flush()
        for task in (self._renewer, self._reconciler, self._reaper):
            await stop(task)
