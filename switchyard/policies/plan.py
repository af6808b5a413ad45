"""Per (principal, model) admission plans: which counters a request touches, computed once.

A plan names every store key of the key, team and (team, model) scopes and flattens their limits
into one vector, so admission is one script call with precomputed arguments. Every key of a team
carries the hash tag ``{team}``, so one request's keys live in one Redis Cluster slot.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, replace

from switchyard.core.settings import Limits

# Limit kinds, in vector order. Spend is in nano-USD so the store works in integers.
KINDS = ("rpm", "tpm", "concurrency", "tokens_per_day", "tokens_per_month",
         "spend_per_day", "spend_per_month")
NONE = -1
NANO = 1_000_000_000
# In a scope's tokens/day slot: the scope's month quotas count for its whole lifetime (a
# session's budget): the scripts keep its month at 0, which never ends.
LIFETIME = -2


def limit_vector(lim: Limits) -> tuple[int, ...]:
    def n(v: int | None) -> int:
        return NONE if v is None else int(v)

    def usd(v: float | None) -> int:
        return NONE if v is None else round(v * NANO)

    if lim.soft:  # a soft budget's quotas alert only (policies.alerts): nothing to admit against
        return (n(lim.rpm), n(lim.tpm), n(lim.max_concurrency), NONE, NONE, NONE, NONE)
    return (n(lim.rpm), n(lim.tpm), n(lim.max_concurrency), n(lim.tokens_per_day),
            n(lim.tokens_per_month), usd(lim.spend_per_day), usd(lim.spend_per_month))


def session_vector(lim: Limits) -> tuple[int, ...] | None:
    """A session scope's limits: its lifetime quotas in the month slots (``LIFETIME``)."""
    if lim.soft or (lim.tokens_per_session is None and lim.spend_per_session is None):
        return None
    tokens = NONE if lim.tokens_per_session is None else lim.tokens_per_session
    spend = NONE if lim.spend_per_session is None else round(lim.spend_per_session * NANO)
    return (NONE, NONE, NONE, LIFETIME, tokens, NONE, spend)


def tag(team: str) -> str:
    # Braces inside a name would move the hash tag; keep them out of it.
    return "{" + team.replace("{", "(").replace("}", ")") + "}"


@dataclass(frozen=True, slots=True)
class Scope:
    label: str  # how messages name it: "key alice", "team ml", "team ml model openai/gpt-4o"
    prefix: str  # store key prefix
    vector: tuple[int, ...]
    # Counters (HASH: rq tk GCRA, d td sd / m tm sm quotas) and concurrency leases (ZSET).
    keys: tuple[str, str] = ("", "")


def scope(label: str, prefix: str, vector: tuple[int, ...]) -> Scope:
    return Scope(label, prefix, vector, (f"{prefix}:c", f"{prefix}:cc"))


@dataclass(frozen=True, slots=True)
class Plan:
    team: str
    model: str
    key_id: str
    scopes: tuple[Scope, ...]
    keys: tuple[str, ...]  # 2 per scope, flattened
    vector: tuple[int, ...]  # 7 per scope, flattened
    agg_prefix: str  # + ":<day>" -> the team's daily aggregates hash
    log: str  # the team's usage record stream
    mark_prefix: str  # + ticket id -> the ticket's admission mark (admit.lua)
    resv: tuple[str, str]  # the team's quota reservations: ZSET mark -> expiry, HASH mark -> what (reap.lua)
    has_concurrency: bool
    has_limits: bool
    has_quota: bool = False  # some scope has a token or spend quota (a reservation to renew)
    has_spend: bool = False  # some scope has a spend quota (its route must have a price)

    def agg_key(self, day: int) -> str:
        return f"{self.agg_prefix}:{day}"


def attribution_scopes(ns: str, key_id: str, team: str, tags: tuple[str, ...], end_user: str, session: str,
                       key_limits: Limits, team_limits: Limits, end_user_limits: Limits | None,
                       tag_limits: dict[str, Limits]) -> tuple[Scope, ...]:
    """The scopes a request's session, end user and tags add to its plan (policies.attribution):
    each session id seen on the key and on the team (their ``*_per_session`` limits), the team's
    end user and the team's tags that have limits. "|" never occurs in a key id or a value."""
    t = f"{ns}:{tag(team)}"
    out = []
    if session:
        for per, prefix in ((key_limits, f"{t}:ks:{key_id}|"), (team_limits, f"{t}:ts:")):
            sv = session_vector(per)
            if sv is not None:
                out.append(scope(f"session {session}", prefix + session, sv))
    if end_user and end_user_limits is not None:
        v = limit_vector(end_user_limits)
        if any(x != NONE for x in v):
            out.append(scope(f"end user {end_user}", f"{t}:eu:{end_user}", v))
    for name in tags:
        lim = tag_limits.get(name)
        if lim is not None:
            v = limit_vector(lim)
            if any(x != NONE for x in v):
                out.append(scope(f"tag {name}", f"{t}:tg:{name}", v))
    return tuple(out)


def with_scopes(plan: Plan, extra: tuple[Scope, ...]) -> Plan:
    """``plan`` with ``extra`` scopes checked and charged in the same admission."""
    scopes = plan.scopes + extra
    return replace(
        plan, scopes=scopes, keys=plan.keys + tuple(k for s in extra for k in s.keys),
        vector=plan.vector + tuple(v for s in extra for v in s.vector),
        has_concurrency=plan.has_concurrency or any(s.vector[2] != NONE for s in extra),
        has_quota=plan.has_quota or any(v != NONE for s in extra for v in s.vector[3:]),
        has_spend=plan.has_spend or any(v != NONE for s in extra for v in s.vector[5:7]),
        has_limits=True)


def resv_keys(ns: str, team: str) -> tuple[str, str]:
    t = f"{ns}:{tag(team)}"
    return f"{t}:resv", f"{t}:resvd"


def model_limits_name(model: str, names: Container[str]) -> str | None:
    """Which of a team's per-model limits ``model`` falls under: its exact name, then its model
    group, then vendor/* (one only, as admission charges it)."""
    parts = model.split("/")
    for name in (model, "/".join(parts[:2]), f"{parts[0]}/*"):
        if name in names:
            return name
    return None


def model_limits_for(model: str, table: dict[str, Limits]) -> tuple[str, Limits] | None:
    """The (team, model) limits that apply (``model_limits_name``)."""
    name = model_limits_name(model, table) if table else None
    return None if name is None else (name, table[name])


def build_plan(ns: str, key_id: str, team: str, model: str, key_limits: Limits,
               team_limits: Limits, team_model_limits: dict[str, Limits]) -> Plan:
    t = f"{ns}:{tag(team)}"
    scopes = [scope(f"key {key_id}", f"{t}:k:{key_id}", limit_vector(key_limits)),
              scope(f"team {team}", f"{t}:t", limit_vector(team_limits))]
    found = model_limits_for(model, team_model_limits)
    if found is not None:
        name, lim = found
        scopes.append(scope(f"team {team} model {name}", f"{t}:m:{name}", limit_vector(lim)))
    # Scopes without any limit cost nothing to check: leave them out of the script call.
    live = tuple(s for s in scopes if any(v != NONE for v in s.vector))
    return Plan(
        team=team, model=model, key_id=key_id, scopes=live,
        keys=tuple(k for s in live for k in s.keys),
        vector=tuple(v for s in live for v in s.vector),
        agg_prefix=f"{t}:agg", log=f"{t}:log", mark_prefix=f"{t}:adm:", resv=resv_keys(ns, team),
        has_concurrency=any(s.vector[2] != NONE for s in live),
        has_quota=any(v != NONE for s in live for v in s.vector[3:]),
        has_spend=any(v != NONE for s in live for v in s.vector[5:7]),
        has_limits=bool(live),
    )
