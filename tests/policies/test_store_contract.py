"""The store contract, through the Limiter, against memory://, sqlite://, Redis and a 3-node Redis
Cluster."""

from __future__ import annotations

import asyncio
import re

import pytest

from switchyard.core.canonical import Usage
from switchyard.core.errors import Forbidden, RateLimited
from switchyard.core.settings import Limits
from switchyard.policies.attribution import Attribution
from switchyard.policies.base import Outcome, Principal, Ticket
from switchyard.policies.limits import LOWERED_HEADER, Limiter
from switchyard.policies.store import DAY_MS, UsageRecord
from switchyard.policies.usage import usage_row
from tests.policies.conftest import make_config

GPT = "openai/gpt-4o"
SMOL = "local/smol"


def who(key: str = "alice", team: str = "ml", *, key_limits: Limits | None = None,
        team_limits: Limits | None = None, model_limits: dict[str, Limits] | None = None,
        shrink: bool = False) -> Principal:
    """A caller; quotas refuse whole (``shrink``: lower max_tokens instead, the default in use)."""
    team_limits = (team_limits or Limits()).model_copy(update={"shrink_max_tokens": shrink})
    return Principal(key_id=key, team=team, key_limits=key_limits or Limits(),
                     team_limits=team_limits, team_model_limits=model_limits or {})


async def admit(lim: Limiter, p: Principal, model: str = SMOL, prompt: int = 10,
                max_tokens: int = 10) -> Ticket:
    return await lim.admit(p, model, prompt_tokens=prompt, max_tokens=max_tokens)


async def refused(lim: Limiter, p: Principal, model: str = SMOL, prompt: int = 10,
                  max_tokens: int = 10) -> RateLimited:
    with pytest.raises(RateLimited) as e:
        await admit(lim, p, model, prompt, max_tokens)
    return e.value


async def settle(lim: Limiter, t: Ticket, prompt: int, completion: int, status: int = 200) -> None:
    await lim.settle(t, Outcome(Usage(prompt, completion), status, deployment="eng", latency_ms=1.0))


async def test_rpm_is_exact_under_concurrency(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(key_limits=Limits(rpm=20))
    results = await asyncio.gather(*(admit(lim, p) for _ in range(60)), return_exceptions=True)
    ok = [r for r in results if isinstance(r, Ticket)]
    no = [r for r in results if isinstance(r, RateLimited)]
    assert (len(ok), len(no)) == (20, 40)
    assert no[0].message.startswith("key alice: requests per minute limit 20 reached; retry in ")
    assert no[0].status == 429 and int(no[0].headers["Retry-After"]) >= 1


async def test_rpm_refills_at_the_limit_rate(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(key_limits=Limits(rpm=20))  # one request every 3 s
    for _ in range(20):
        await admit(lim, p)
    e = await refused(lim, p)
    assert e.headers["Retry-After"] == "3"
    store.skew_ms += 3000
    await admit(lim, p)
    await refused(lim, p)


async def test_ratelimit_headers_as_openai_sends_them(store, limiter_for):
    lim = limiter_for(make_config())
    t = await admit(lim, who(key_limits=Limits(rpm=60, tpm=1000)), prompt=60, max_tokens=40)
    assert t.headers == {
        "x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "1s", "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "900", "x-ratelimit-reset-tokens": "6s",
    }


async def test_headers_report_the_tightest_scope(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(key_limits=Limits(rpm=100), team_limits=Limits(rpm=3))
    t = await admit(lim, p)
    assert t.headers["x-ratelimit-limit-requests"] == "3"
    assert t.headers["x-ratelimit-remaining-requests"] == "2"
    assert "x-ratelimit-limit-tokens" not in t.headers


async def test_tpm_reserves_then_refunds_at_settle(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(key_limits=Limits(tpm=1000))
    t1 = await admit(lim, p, prompt=100, max_tokens=500)
    assert t1.headers["x-ratelimit-remaining-tokens"] == "400"
    e = await refused(lim, p, prompt=100, max_tokens=500)
    assert "key alice: tokens per minute limit 1000 reached (this request reserves 600 tokens)" in e.message
    await settle(lim, t1, 100, 50)  # 450 of the 600 come back
    t2 = await admit(lim, p, prompt=100, max_tokens=500)
    assert 240 <= int(t2.headers["x-ratelimit-remaining-tokens"]) <= 260  # 1000-150-600, plus refill


async def test_tpm_charges_what_was_produced_beyond_the_reservation(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(key_limits=Limits(tpm=1000))
    t = await admit(lim, p, prompt=100, max_tokens=100)
    await settle(lim, t, 100, 850)  # the upstream ignored max_tokens: 950 tokens spent
    e = await refused(lim, p, prompt=50, max_tokens=50)
    assert "tokens per minute" in e.message


async def test_a_request_larger_than_tpm_is_refused_with_a_reason(store, limiter_for):
    lim = limiter_for(make_config())
    e = await refused(lim, who(key_limits=Limits(tpm=100)), prompt=50, max_tokens=100)
    assert e.message == ("key alice: request reserves 150 tokens (prompt + max_tokens), more than the "
                         "tokens per minute limit 100; lower max_tokens")


async def test_unbounded_max_tokens_reserves_the_default(store, limiter_for):
    lim = limiter_for(make_config())
    t = await admit(lim, who(key_limits=Limits(tpm=100_000)), prompt=10, max_tokens=-1)
    assert t.reserved_tokens == 10 + 4096


async def test_concurrency_slots_are_released_at_settle(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(team_limits=Limits(max_concurrency=2))
    t1, _ = await admit(lim, p), await admit(lim, p)
    e = await refused(lim, p)
    assert e.message == "team ml: concurrent requests limit 2 reached; retry in 1 s"
    await settle(lim, t1, 1, 1, status=499)  # a cancelled stream settles too
    await admit(lim, p)
    await refused(lim, p)


async def test_settle_is_idempotent(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(key_limits=Limits(max_concurrency=1, tokens_per_day=1000))
    t = await admit(lim, p, prompt=100, max_tokens=100)
    await settle(lim, t, 100, 100)
    await settle(lim, t, 100, 100)
    rows = (await store.aggregates("ml", [t.admitted_ms // DAY_MS]))[t.admitted_ms // DAY_MS]
    assert rows["alice\x1flocal/smol\x1frequests"] == 1


async def test_a_crashed_holder_s_lease_expires(store, limiter_for):
    lim = limiter_for(make_config(), lease_ttl_ms=60_000)
    p = who(key_limits=Limits(max_concurrency=1))
    await admit(lim, p)  # never settled: the replica "crashed"
    await refused(lim, p)
    store.skew_ms += 60_001
    await admit(lim, p)


async def test_live_leases_are_renewed(store, limiter_for):
    lim = limiter_for(make_config(), lease_ttl_ms=900)  # renewed every 0.3 s
    p = who(key_limits=Limits(max_concurrency=1))
    t = await admit(lim, p)
    await asyncio.sleep(2.0)
    await refused(lim, p)  # still held: the holder is alive
    await settle(lim, t, 1, 1)
    await admit(lim, p)
    await lim.aclose()


async def test_daily_token_quota_and_its_reset(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(key_limits=Limits(tokens_per_day=1000))
    t = await admit(lim, p, prompt=300, max_tokens=300)
    await settle(lim, t, 300, 300)
    e = await refused(lim, p, prompt=300, max_tokens=200)
    assert e.message.startswith("key alice: daily token quota 1000 reached; retry in ")
    assert 1 <= int(e.headers["Retry-After"]) <= 86_400
    t = await admit(lim, p, prompt=300, max_tokens=100)  # exactly 1000
    await settle(lim, t, 300, 20)  # 80 come back
    await admit(lim, p, prompt=40, max_tokens=40)
    store.skew_ms += DAY_MS
    await admit(lim, p, prompt=500, max_tokens=500)


async def test_monthly_token_quota_spans_days(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(team_limits=Limits(tokens_per_month=1000))
    await settle(lim, await admit(lim, p, prompt=400, max_tokens=200), 400, 200)
    store.skew_ms += DAY_MS  # another day, very likely the same month
    same_month = (await admit(lim, who(key="bob"), SMOL)).admitted_ms  # no limits: just the clock
    from switchyard.policies.store import month_of
    t0 = same_month - DAY_MS
    if month_of(t0) == month_of(same_month):
        e = await refused(lim, p, prompt=400, max_tokens=100)
        assert e.message.startswith("team ml: monthly token quota 1000 reached")
    store.skew_ms += 32 * DAY_MS
    await admit(lim, p, prompt=400, max_tokens=500)


async def test_spend_quota_counts_reservations_and_real_cost(store, limiter_for):
    lim = limiter_for(make_config())
    # gpt-4o: $2.5 / 1M prompt, $10 / 1M completion. $0.01 = 1000 prompt + 750 completion tokens.
    p = who(key_limits=Limits(spend_per_day=0.01))
    t = await admit(lim, p, GPT, prompt=1000, max_tokens=750)  # reserves exactly $0.01
    e = await refused(lim, p, GPT, prompt=1, max_tokens=0)
    assert e.message.startswith("key alice: daily spend quota $0.01 reached; retry in ")
    await settle(lim, t, 1000, 250)  # real cost $0.005
    t = await admit(lim, p, GPT, prompt=1000, max_tokens=250)  # $0.005 more: exactly the quota
    await settle(lim, t, 1000, 250)
    await refused(lim, p, GPT, prompt=1, max_tokens=0)
    # local/smol has no price (an openai-compatible upstream whose model the catalog does not
    # list): counted as $0 it would slip past the quota, so it is refused, saying why.
    with pytest.raises(Forbidden, match=r"model local/smol has no price \(deployment eng: openai model "
                       r"'smol' is not in the genai-prices catalog; set models\[\]\.price\)"):
        await admit(lim, p, SMOL, prompt=1000, max_tokens=1000)


async def test_a_token_quota_shrinks_max_tokens_to_what_is_left(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(key_limits=Limits(tokens_per_day=1000), shrink=True)
    t = await admit(lim, p, prompt=300, max_tokens=300)
    assert t.max_tokens == 300 and not t.lowered and LOWERED_HEADER not in t.headers
    t2 = await admit(lim, p, prompt=100, max_tokens=2000)  # 400 left: 100 prompt + 300 completion
    assert (t2.max_tokens, t2.lowered, t2.reserved_tokens) == (300, True, 400)
    assert t2.headers[LOWERED_HEADER] == "300"
    e = await refused(lim, p, prompt=1, max_tokens=100)  # nothing left: a 429 still
    assert e.message.startswith("key alice: daily token quota 1000 reached")
    await settle(lim, t2, 100, 290)  # 10 come back: fewer than the smallest answer
    await refused(lim, p, prompt=1, max_tokens=100)
    t3 = await admit(lim, p, prompt=1, max_tokens=9)  # a request asking less than that fits whole
    assert (t3.max_tokens, t3.lowered) == (9, False)


async def test_shrinking_splits_the_remainder_between_choices_and_the_key_setting_wins(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(key_limits=Limits(tokens_per_day=1000), shrink=True)
    t = await lim.admit(p, SMOL, prompt_tokens=100, max_tokens=1000, choices=3)  # 900 for 3 choices
    assert (t.max_tokens, t.reserved_tokens) == (300, 1000)
    off = who(key="bob", key_limits=Limits(tokens_per_day=1000, shrink_max_tokens=False), shrink=True)
    await refused(lim, off, prompt=100, max_tokens=1000)


async def test_a_spend_quota_shrinks_max_tokens_to_what_the_remainder_buys(store, limiter_for):
    lim = limiter_for(make_config())
    # gpt-4o: $2.5 / 1M prompt, $10 / 1M completion; $0.01 buys 1000 prompt + 750 completion tokens.
    p = who(key_limits=Limits(spend_per_day=0.01), shrink=True)
    t = await admit(lim, p, GPT, prompt=1000, max_tokens=2000)
    assert (t.max_tokens, t.lowered, t.reserved_spend) == (750, True, 10_000_000)
    await refused(lim, p, GPT, prompt=1, max_tokens=100)
    # local/smol has no price (an openai-compatible upstream whose model the catalog does not
    # list): counted as $0 it would slip past the quota, so it is refused, saying why.
    with pytest.raises(Forbidden, match=r"model local/smol has no price \(deployment eng: openai model "
                       r"'smol' is not in the genai-prices catalog; set models\[\]\.price\)"):
        await admit(lim, p, SMOL, prompt=1000, max_tokens=1000)


async def test_monthly_spend_quota(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(team_limits=Limits(spend_per_month=0.001))
    await admit(lim, p, GPT, prompt=400, max_tokens=0)  # $0.001
    e = await refused(lim, p, GPT, prompt=1, max_tokens=0)
    assert "team ml: monthly spend quota $0.001 reached" in e.message


async def test_refusal_by_the_team_leaves_the_key_untouched(store, limiter_for):
    lim = limiter_for(make_config())
    team = Limits(rpm=2)
    alice = who(key_limits=Limits(tpm=1000, tokens_per_day=1000, max_concurrency=5), team_limits=team)
    bob = who(key="bob", team_limits=team)
    await admit(lim, bob)
    await admit(lim, bob)
    for _ in range(5):
        e = await refused(lim, alice, prompt=100, max_tokens=100)
        assert e.message.startswith("team ml: requests per minute limit 2 reached")
    store.skew_ms += 30_000  # the team gets one request back
    t = await admit(lim, alice, prompt=100, max_tokens=100)
    assert t.headers["x-ratelimit-remaining-tokens"] == "800"  # the 5 refusals reserved nothing
    # ... nor took quota or slots: 4 more slots and 800 more tokens today remain.
    store.skew_ms += 30_000


async def test_team_model_limits_apply_to_that_model_only(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(model_limits={GPT: Limits(rpm=1)})
    await admit(lim, p, GPT)
    e = await refused(lim, p, GPT)
    assert e.message.startswith("team ml model openai/gpt-4o: requests per minute limit 1 reached")
    await refused(lim, p, f"{GPT}/oai")  # a pinned deployment counts against its model group...
    for _ in range(3):
        await admit(lim, p, SMOL)  # ... another model does not


async def test_teams_do_not_share_counters(store, limiter_for):
    lim = limiter_for(make_config())
    lim_ = Limits(rpm=1)
    await admit(lim, who(team_limits=lim_))
    await admit(lim, who(key="carol", team="ops", team_limits=lim_))
    await refused(lim, who(key="bob", team_limits=lim_))


async def test_usage_records_and_aggregates(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(key_limits=Limits(rpm=100))
    await settle(lim, await admit(lim, p, GPT, 1000, 100), 1000, 100)
    await lim.settle(await admit(lim, p, GPT, 10, 10),
                     Outcome(Usage(10, 0, cached_tokens=5, cache_write_tokens=2), 502, deployment="oai",
                             latency_ms=7.5))
    await settle(lim, await admit(lim, who(key="bob"), SMOL, 5, 5), 5, 3)
    recs = await store.records("ml", 10)
    assert [(r.key_id, r.model, r.prompt_tokens, r.completion_tokens, r.status) for r in recs] == [
        ("bob", SMOL, 5, 3, 200), ("alice", GPT, 10, 0, 502), ("alice", GPT, 1000, 100, 200)]
    assert recs[1].cached_tokens == 5 and recs[1].latency_ms == 7.5 and recs[1].deployment == "oai"
    assert recs[2].cost_nano == 1000 * 2500 + 100 * 10_000
    assert recs[0].unpriced and recs[0].cost_nano == 0 and not recs[2].unpriced
    day = recs[0].ts_ms // DAY_MS
    agg = (await store.aggregates("ml", [day - 1, day]))[day]
    assert agg == {
        "alice\x1fopenai/gpt-4o\x1frequests": 2, "alice\x1fopenai/gpt-4o\x1ferrors": 1,
        "alice\x1fopenai/gpt-4o\x1fprompt_tokens": 1010, "alice\x1fopenai/gpt-4o\x1fcompletion_tokens": 100,
        "alice\x1fopenai/gpt-4o\x1fcached_tokens": 5, "alice\x1fopenai/gpt-4o\x1fcost_nano": 3_525_000,
        "alice\x1fopenai/gpt-4o\x1fcache_write_tokens": 2,
        "bob\x1flocal/smol\x1frequests": 1, "bob\x1flocal/smol\x1fprompt_tokens": 5,
        "bob\x1flocal/smol\x1fcompletion_tokens": 3,
        "bob\x1flocal/smol\x1funpriced": 1,  # no price: counted apart, never a silent $0
    }
    assert await store.aggregates("ops", [day]) == {}
    assert recs[1].cache_write_tokens == 2
    # Sums kept before cache writes were counted read 0 (the hashes have no such field).
    assert usage_row({"requests": 1, "prompt_tokens": 3})["cache_write_tokens"] == 0


async def test_a_record_says_every_field_of_its_settlement(store, limiter_for):
    """Each field of a settled request's record holds its own value (the Limiter builds the record
    by position: a field out of place would put one value under another's name)."""
    lim = limiter_for(make_config())
    att = Attribution(tags=("red", "blue"), end_user="u-1", session="s-1")
    t = await lim.admit(who(), f"{GPT}/oai", prompt_tokens=40, max_tokens=10, group=GPT, attribution=att)
    await lim.settle(t, Outcome(Usage(40, 7, cached_tokens=3, cache_write_tokens=2), 201, deployment="oai",
                                latency_ms=12.3456, ttfb_ms=4.5678, attempts=2, cut=True, request_id="req-1",
                                endpoint="/v1/chat/completions", dialect="openai",
                                requested_model="gpt-4o-alias", reason="upstream:502", guardrails="pii:mask"))
    [rec] = await store.records("ml", 1)
    want = UsageRecord(ts_ms=t.admitted_ms, key_id="alice", team="ml", model=GPT, deployment="oai",
                       prompt_tokens=40, completion_tokens=7, cached_tokens=3,
                       cost_nano=40 * 2500 + 7 * 10_000,
                       status=201, latency_ms=12.346, request_id="req-1", ticket_id=t.id,
                       endpoint="/v1/chat/completions", dialect="openai", requested_model="gpt-4o-alias",
                       attempts=2, ttfb_ms=4.568, cut=True, reason="upstream:502", cache_write_tokens=2,
                       unpriced=False, tags="red,blue", end_user="u-1", session="s-1", guardrails="pii:mask")
    assert rec == want


async def test_sums_beyond_a_double_s_precision_stay_exact(store, limiter_for):
    """Redis's scripts take the increments as decimal strings: a Lua number (a double) would round
    2**53 + 1 to 2**53."""
    lim = limiter_for(make_config())
    big = 2**53 + 1
    for _ in range(2):
        await settle(lim, await admit(lim, who(), SMOL), big, 1)
    recs = await store.records("ml", 10)
    assert [r.prompt_tokens for r in recs] == [big, big]
    day = recs[0].ts_ms // DAY_MS
    assert (await store.aggregates("ml", [day]))[day]["alice\x1flocal/smol\x1fprompt_tokens"] == 2 * big


async def test_documents_and_sets(store):
    assert await store.get_docs(["a", "b"]) == [None, None]
    await store.put_doc(f"{store.ns}:x", {"id": "x", "n": [1, None]})
    await store.put_doc(f"{store.ns}:y", {"id": "y"})
    got = await store.get_docs([f"{store.ns}:x", f"{store.ns}:y"])
    assert got == [{"id": "x", "n": [1, None]}, {"id": "y"}]
    await store.add_member(f"{store.ns}:s", "a")
    await store.add_member(f"{store.ns}:s", "b")
    assert await store.members(f"{store.ns}:s") == {"a", "b"}


async def test_documents_with_a_ttl_vanish(store):
    short, kept = f"{store.ns}:session:1", f"{store.ns}:session:2"
    await store.put_doc(short, {"csrf": "a"}, ttl_ms=150)
    await store.put_doc(kept, {"csrf": "b"}, ttl_ms=60_000)
    assert await store.get_docs([short, kept]) == [{"csrf": "a"}, {"csrf": "b"}]
    await asyncio.sleep(0.3)
    assert await store.get_docs([short, kept]) == [None, {"csrf": "b"}]
    await store.put_doc(kept, {"csrf": "c"})  # put again without a ttl: kept for good
    await asyncio.sleep(0.01)
    assert await store.get_docs([kept]) == [{"csrf": "c"}]


async def test_the_hot_path_pipelines_and_follows_a_moved_slot(store, limiter_for):
    """Redis stores admit and settle over their own pipelined connection, one per node; a stale
    slot map (MOVED) is followed by redis-py, with the same outcome."""
    lim = limiter_for(make_config())
    p = who(key_limits=Limits(rpm=30, max_concurrency=50), team_limits=Limits(tokens_per_day=10**6))
    tickets = await asyncio.gather(*(admit(lim, p) for _ in range(20)))
    for t in tickets:
        await settle(lim, t, 5, 5)  # returns once sent; the next admissions queue behind
    if hasattr(store, "_conns"):
        assert store._conns, "the hot path did not serve"
        if store._cluster:  # point the team's slot at a node that does not own it
            slot = store._packed(tickets[0].plan).slot
            cache = store.client.nodes_manager.slots_cache
            owner = cache[slot][0]
            cache[slot] = [n for n in store.client.get_primaries() if n.name != owner.name][:1]
    tickets = await asyncio.gather(*(admit(lim, p) for _ in range(10)))
    assert len(tickets) == 10
    await refused(lim, p)  # 30 admitted within the minute: exact across both paths
    for t in tickets:
        await settle(lim, t, 5, 5)
    await lim.flush()
    day = tickets[0].admitted_ms // DAY_MS
    agg = (await store.aggregates("ml", [day]))[day]
    assert agg["alice\x1flocal/smol\x1frequests"] == 30


async def test_tags_end_users_and_sessions_are_summed_apart(store, limiter_for):
    lim = limiter_for(make_config())
    p = who(key_limits=Limits(rpm=100))
    who_for = Attribution(("search", "chat"), "u-7", "s-1")
    t = await lim.admit(p, GPT, prompt_tokens=100, max_tokens=10, attribution=who_for)
    await lim.settle(t, Outcome(Usage(100, 10), 200, deployment="oai", latency_ms=1.0))
    await settle(lim, await admit(lim, p, GPT, 50, 5), 50, 5)  # no attribution
    (rec, tagged) = await store.records("ml", 10)
    assert (tagged.tags, tagged.end_user, tagged.session) == ("search,chat", "u-7", "s-1")
    assert (rec.tags, rec.end_user, rec.session) == ("", "", "")
    day = tagged.ts_ms // DAY_MS
    plain = (await store.aggregates("ml", [day]))[day]
    assert plain["alice\x1fopenai/gpt-4o\x1frequests"] == 2 and not any(k.startswith("\x1e") for k in plain)
    dims = (await store.aggregates("ml", [day], dimensions=True))[day]
    assert {k: v for k, v in dims.items() if k.endswith("requests") or k.endswith("prompt_tokens")} == {
        f"\x1e{d}\x1fopenai/gpt-4o\x1f{m}": n
        for d in ("tag:search", "tag:chat", "end_user:u-7", "session:s-1")
        for m, n in (("requests", 1), ("prompt_tokens", 100))}
    hour = tagged.ts_ms // 3_600_000
    assert not any("\x1e" in k or "search" in k for k in await store.minutes("ml", [hour - 1, hour]))


async def test_audit_entries_append_in_order_and_page_newest_first(store):
    ids = [await store.audit_append({"action": f"a{i}", "n": i}) for i in range(7)]
    assert ids == sorted(ids) and len(set(ids)) == 7  # sortable, newest last, unique in one ms too
    assert all(re.fullmatch(r"\d{15}-\d{6}", i) for i in ids)  # the one shape /admin/audit takes as a cursor
    page = await store.audit_read(None, 3)
    assert [e["n"] for e in page] == [6, 5, 4] and [e["id"] for e in page] == ids[:3:-1]
    page = await store.audit_read(page[-1]["id"], 3)
    assert [e["n"] for e in page] == [3, 2, 1]
    page = await store.audit_read(page[-1]["id"], 3)
    assert [e["n"] for e in page] == [0]
    assert await store.audit_read(ids[0], 3) == []
    # What was read is a copy: changing it changes nothing stored.
    page[0]["action"] = "edited"
    assert (await store.audit_read(ids[1], 1))[0]["action"] == "a0"


async def test_a_claim_is_won_once_until_it_expires(store):
    """Alerts send a threshold once across replicas by claiming its name (policies/alerts.py)."""
    name = f"{store.ns}:alert:t:x"
    # 1 s to expire: the claims before the wait must all land within it on a loaded machine
    assert sorted(await asyncio.gather(*(store.claim(name, 1000) for _ in range(5)))) == [False] * 4 + [True]
    assert await store.claim(name, 1000) is False
    await asyncio.sleep(1.1)
    assert await store.claim(name, 60_000) is True
    assert await store.claim(name, 60_000) is False
