"""Budgets per session, end user and tag, in the same atomic admission as every other limit, on
every store (in-process, Redis, Redis Cluster): exact under concurrency, shrink-instead-of-refuse,
refusals that name the scope, and a session's budget that never resets."""

from __future__ import annotations

import asyncio
import time

import pytest

from switchyard.core.canonical import Usage
from switchyard.core.errors import RateLimited
from switchyard.core.settings import Limits
from switchyard.policies.attribution import Attribution
from switchyard.policies.base import Outcome, Principal, Ticket
from switchyard.policies.limits import LOWERED_HEADER
from switchyard.policies.pricing import nano_usd
from switchyard.policies.store import DAY_MS
from tests.policies.conftest import make_config

GPT = "openai/gpt-4o"  # $2.5 / 1M prompt, $10 / 1M completion


def who(*, key_limits: Limits | None = None, team_limits: Limits | None = None,
        end_user_limits: Limits | None = None, tag_limits: dict[str, Limits] | None = None,
        shrink: bool = False) -> Principal:
    team_limits = (team_limits or Limits()).model_copy(update={"shrink_max_tokens": shrink})
    return Principal(key_id="alice", team="ml", key_limits=key_limits or Limits(), team_limits=team_limits,
                     team_end_user_limits=end_user_limits, team_tag_limits=tag_limits or {})


async def admit(lim, p: Principal, a: Attribution, prompt: int = 1000, max_tokens: int = 0) -> Ticket:
    return await lim.admit(p, GPT, prompt_tokens=prompt, max_tokens=max_tokens, attribution=a)


async def settle(lim, t: Ticket, prompt: int, completion: int) -> None:
    await lim.settle(t, Outcome(Usage(prompt, completion), 200, deployment="openai/gpt-4o/oai",
                                latency_ms=1.0))


async def test_a_session_budget_is_exact_under_concurrency_and_names_the_session(store, limiter_for):
    lim = limiter_for(make_config())
    # $0.0025 a request (1000 prompt tokens): $0.05 holds exactly 20 of them per session.
    p = who(key_limits=Limits(spend_per_session=0.05))
    s1 = Attribution(session="s-1")
    results = await asyncio.gather(*(admit(lim, p, s1) for _ in range(50)), return_exceptions=True)
    ok = [r for r in results if isinstance(r, Ticket)]
    no = [r for r in results if isinstance(r, RateLimited)]
    assert (len(ok), len(no)) == (20, 30)
    assert no[0].message == "session s-1: spend quota $0.05 per session reached"
    assert no[0].scope == "session" and no[0].limit == "spend_per_session"
    assert "Retry-After" not in no[0].headers  # a session's budget never comes back
    await asyncio.gather(*(settle(lim, t, 1000, 0) for t in ok))
    # another session of the same key has a budget of its own; no session: no session budget
    await admit(lim, p, Attribution(session="s-2"))
    await admit(lim, p, Attribution())
    # a lifetime: a month later s-1 is still spent
    store.skew_ms += 40 * DAY_MS
    with pytest.raises(RateLimited, match="session s-1"):
        await admit(lim, p, s1)


async def test_a_ticket_says_every_field_of_its_admission(store, limiter_for):
    """``Limiter.admit`` builds its ticket by position: each value lands in its own field."""
    lim = limiter_for(make_config())
    p = who(key_limits=Limits(tokens_per_day=1500, max_concurrency=3), shrink=True)
    a = Attribution(session="s-9")
    before, now_ms = time.monotonic(), time.time_ns() // 1_000_000
    # an alias's configured name (model) and the group its usage is priced and kept under
    t = await lim.admit(p, "alias/gpt", prompt_tokens=1000, max_tokens=2000, attribution=a, group=GPT)
    assert t.principal is p and (t.model, t.group) == ("alias/gpt", GPT)
    assert (t.prompt_tokens, t.max_tokens, t.reserved_tokens) == (1000, 500, 1500)  # shrunk to fit
    assert t.lowered and t.headers[LOWERED_HEADER] == "500"
    assert len(t.id) == 18 and t.lease_id == t.id  # (a concurrency limit holds a lease)
    assert before <= t.started <= time.monotonic() and not t.settled and not t.local
    assert abs(t.admitted_ms - now_ms) < 60_000  # the store's clock
    assert t.prices is not None and t.reserved_spend == nano_usd(t.prices.reserve, 1000, 500) > 0
    assert t.plan.key_id == "alice" and t.attribution is a
    assert (t.cost_nano, t.unpriced, t.saved_nano) == (0, False, 0)


async def test_session_tokens_on_the_team_shrink_instead_of_refusing(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(team_limits=Limits(tokens_per_session=1500), shrink=True)
    a = Attribution(session="run-7")
    t = await admit(lim, p, a, prompt=1000, max_tokens=2000)  # 500 left for the answer
    assert (t.max_tokens, t.lowered) == (500, True)
    await settle(lim, t, 1000, 400)  # 100 tokens left
    t = await admit(lim, p, a, prompt=50, max_tokens=100)
    assert t.max_tokens == 50


async def test_end_user_and_tag_budgets(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(end_user_limits=Limits(tokens_per_day=2000), tag_limits={"search": Limits(rpm=2)})
    u7 = Attribution(end_user="u-7")
    await settle(lim, await admit(lim, p, u7), 1000, 0)
    await settle(lim, await admit(lim, p, u7), 1000, 0)
    e = await asyncio.gather(admit(lim, p, u7), return_exceptions=True)
    assert isinstance(e[0], RateLimited)
    assert e[0].message.startswith("end user u-7: daily token quota 2000 reached")
    assert e[0].scope == "end_user"
    await admit(lim, p, Attribution(end_user="u-8"))  # each end user has their own
    search = Attribution(tags=("chat", "search"))
    await admit(lim, p, search)
    await admit(lim, p, search)
    with pytest.raises(RateLimited, match=r"^tag search: requests per minute limit 2 reached"):
        await admit(lim, p, search)
    await admit(lim, p, Attribution(tags=("chat",)))  # a tag without limits: nothing to count


def test_an_alert_counts_a_model_under_the_one_per_model_limit_admission_charges():
    """A team with limits on openai/gpt-4o and on openai/*: gpt-4o's usage fills the first only,
    as admission charges it (plan.model_limits_name), and the rest of openai/* the second."""
    from switchyard.policies.alerts import Budget, _used
    from switchyard.policies.store import SEP

    aggs = {5: {f"k1{SEP}openai/gpt-4o{SEP}prompt_tokens": 10,
                f"k1{SEP}openai/gpt-4o-mini{SEP}prompt_tokens": 7,
                f"k1{SEP}anthropic/claude{SEP}prompt_tokens": 3}}
    per_model = frozenset({"openai/gpt-4o", "openai/*"})
    exact = Budget("team t model openai/gpt-4o", {"tokens_per_day": 100}, model="openai/gpt-4o",
                   models=per_model)
    vendor = Budget("team t model openai/*", {"tokens_per_day": 100}, model="openai/*", models=per_model)
    assert _used(exact, "tokens_per_day", [5], aggs) == {exact.scope: 10}
    assert _used(vendor, "tokens_per_day", [5], aggs) == {vendor.scope: 7}
