"""The store interface: the atomic admission/settlement primitives and small document storage.

Three implementations: ``memory.MemoryStore`` (in-process, one replica, nothing kept),
``sqlite_store.SqliteStore`` (its counters, with the documents, sets and audit trail in an SQLite
file) and ``redis_store.RedisStore`` (every replica shares it; Redis or Redis Cluster).
``tests/policies/test_store_contract.py`` runs the same suite against each.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol

from switchyard.policies.attribution import Attribution, dimension_keys
from switchyard.policies.plan import Plan

if TYPE_CHECKING:
    from redis.asyncio import Redis, RedisCluster

DAY_MS = 86_400_000


class StoreDown(Exception):
    """The store did not answer in time or refused the connection."""


class StoreSlow(StoreDown):
    """An admin read took longer than its (longer) deadline: the store answers, the query is big."""


@dataclass(slots=True)
class Admission:
    ok: bool
    now_ms: int  # the store's clock at admission (Redis TIME)
    scope: int = -1  # refused: index into plan.scopes
    kind: str = ""  # refused: a plan.KINDS entry, or "too_large" (can never fit the tpm limit)
    retry_ms: int = 0
    limit: int = 0
    req: tuple[int, int, int] | None = None  # tightest request limit: (limit, remaining, reset ms)
    tok: tuple[int, int, int] | None = None  # tightest token limit: (limit, remaining, reset ms)
    remaining: int = -1  # refused by a quota: what it has left (tokens, or nano-USD); else -1


@dataclass(slots=True)
class UsageRecord:
    """One request's usage, as settled. Never the key, never the prompt.

    ``ticket_id`` is unique per admitted request (the idempotency key downstream, e.g. the
    ledger); ``request_id`` is the caller's ``x-request-id`` or one the gateway made, so it may
    repeat. ``model`` is the group that admitted it, ``requested_model`` what the caller named.
    """

    ts_ms: int
    key_id: str
    team: str
    model: str
    deployment: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost_nano: int
    status: int
    latency_ms: float
    request_id: str = ""
    ticket_id: str = ""
    endpoint: str = ""
    dialect: str = ""
    requested_model: str = ""
    attempts: int = 0
    ttfb_ms: float = -1.0  # -1: no byte of an answer was sent
    cut: bool = False  # a stream that ended before its last event (either side hung up)
    # Why it was refused or failed ('' = answered): which check or limit, e.g. model_not_allowed,
    # rate_limit:rpm, quota:spend_day, bad_request:<param> (``switchyard.policies.refusals``).
    reason: str = ""
    cache_write_tokens: int = 0  # prompt tokens written to the upstream's prompt cache (in prompt_tokens)
    unpriced: bool = False  # the deployment that served it has no known price (cost_nano is 0)
    tags: str = ""  # comma list (policies.attribution)
    end_user: str = ""
    session: str = ""
    # The guardrails that acted, "<name>:<action>,..." as x-switchyard-guardrails says (never the text).
    guardrails: str = ""
    # Answered from the response cache (docs/cache.md): no upstream call, no tokens charged; what
    # the original answer's tokens and price were is what the hit saved.
    cache_hit: bool = False
    saved_tokens: int = 0
    saved_nano: int = 0

    def as_fields(self) -> dict[str, str]:
        return {k: _str(v) for (k, _), v in zip(_DEFAULTS, _values(self), strict=True)}

    def set_fields(self) -> list[str]:
        """``as_fields`` less the fields at their defaults, as XADD takes them (name, value, name,
        ...): what a kept record must say, since ``from_fields`` and the ledger's INSERT give those
        the same defaults (a plain request's record has 18 fields to write, not 29)."""
        out: list[str] = []
        # Two appends and _str's tests inline (not a call a field): 44k instructions a record,
        # where ``out += (k, _str(v))`` took 55k and two appends calling _str 51k.
        add = out.append
        for (k, default), v in zip(_DEFAULTS, _values(self), strict=True):
            if v != default:
                add(k)
                t = type(v)
                add(v if t is str else ("1" if v else "0") if t is bool else str(v))
        return out

    @classmethod
    def from_fields(cls, f: dict[str, Any]) -> UsageRecord:
        """From a stored record's fields (bytes or str); fields older records lack take defaults."""
        out: dict[str, Any] = {}
        for k, kind in _FIELD_TYPES.items():
            if k not in f:
                continue
            v = f[k]
            s = v.decode() if isinstance(v, bytes) else str(v)
            out[k] = s == "1" if kind is bool else kind(s)
        return cls(**out)


def _str(v: Any) -> str:
    """A field's value as the stores keep it (booleans as 1 and 0)."""
    return v if type(v) is str else ("1" if v else "0") if type(v) is bool else str(v)


# (name, default) per field; a field without a default (dataclasses.MISSING) is never left out.
_DEFAULTS = tuple((f.name, f.default) for f in fields(UsageRecord))
_values = attrgetter(*(name for name, _ in _DEFAULTS))

_FIELD_TYPES: dict[str, type] = {
    **dict.fromkeys(("ts_ms", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_nano",
                     "status", "attempts", "cache_write_tokens", "saved_tokens", "saved_nano"), int),
    **dict.fromkeys(("latency_ms", "ttfb_ms"), float),
    **dict.fromkeys(("cut", "unpriced", "cache_hit"), bool),
    **dict.fromkeys(("key_id", "team", "model", "deployment", "request_id", "ticket_id", "endpoint",
                     "dialect", "requested_model", "reason", "tags", "end_user", "session",
                     "guardrails"), str),
}


# Aggregate metrics kept per (team, day, key, model); hash field = "<key>\x1f<model>\x1f<metric>".
# The same sums per (team, minute, model) for the last two hours: "<minute>\x1f<model>\x1f<metric>"
# in the hash of the minute's hour (the scripts derive these fields from the daily ones).
# A metric added later is simply absent from older hashes: it reads 0 (usage.usage_row).
METRICS = ("requests", "errors", "refused", "prompt_tokens", "completion_tokens", "cached_tokens",
           "cost_nano", "cache_write_tokens", "unpriced", "cache_hits", "saved_tokens", "saved_nano")
SEP = "\x1f"
MINUTE_MS = 60_000
HOUR_MS = 3_600_000
MINUTES_KEPT_MS = 2 * HOUR_MS + MINUTE_MS  # a minute hash outlives its hour by this much
# Days the store keeps the sums per tag, end user and session (a field per value: sessions are
# many; the ledger keeps them as long as its records). The scripts say the same (settle.lua).
DIMENSION_DAYS = 35


AUDIT_KEPT = 1_000_000  # audit entries a store keeps at most (the oldest go first)


def audit_id(ms: int, seq: int) -> str:
    """An audit entry's id: sortable as a string, newest last."""
    return f"{ms:015d}-{seq:06d}"


def refused(status: int, attempts: int) -> bool:
    """Refused by the gateway's own checks: a 4xx answered without calling any model."""
    return 400 <= status < 500 and attempts == 0


def metric_values(r: UsageRecord) -> list[tuple[str, int]]:
    """The record's non-zero metrics, by name."""
    vals = (1, 1 if r.status >= 400 else 0, 1 if refused(r.status, r.attempts) else 0, r.prompt_tokens,
            r.completion_tokens, r.cached_tokens, r.cost_nano, r.cache_write_tokens, 1 if r.unpriced else 0,
            1 if r.cache_hit else 0, r.saved_tokens, r.saved_nano)
    return [(m, v) for m, v in zip(METRICS, vals, strict=True) if v]


def agg_increments(r: UsageRecord) -> list[str]:
    """The daily aggregate's fields "<key>\x1f<model>\x1f<metric>", each followed by what it gains
    (field, increment, field, ...); a minute's fields are "<minute>\x1f<model>\x1f<metric>"
    (settle.lua writes both). Increments as decimal strings: a Lua number would be a double."""
    vals = [(m, str(v)) for m, v in metric_values(r)]
    out: list[str] = []
    add = out.append
    for dim in (r.key_id, *dimension_keys_of(r)):  # no minute copies of a dimension's (the scripts skip them)
        base = f"{dim}{SEP}{r.model}{SEP}"
        for m, v in vals:
            add(base + m)
            add(v)
    return out


def dimension_keys_of(r: UsageRecord) -> Sequence[str]:
    """The aggregate "key" parts of a record's tags, end user and session (policies.attribution)."""
    if not (r.tags or r.end_user or r.session):
        return ()  # the common case: nothing allocated
    return dimension_keys(Attribution(tuple(r.tags.split(",")) if r.tags else (), r.end_user, r.session))


def month_of(ms: int) -> int:
    """year * 12 + (month - 1) of a UTC epoch-ms instant (civil-from-days, as the Lua does)."""
    return _month_of_day(ms // DAY_MS)


@functools.lru_cache(maxsize=64)  # asked at each admission and settlement: 0.56 us, 0.14 remembered
def _month_of_day(day: int) -> int:
    z = day + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    m = mp + 3 if mp < 10 else mp - 9
    y = yoe + era * 400 + (1 if m <= 2 else 0)
    return y * 12 + m - 1


class Store(Protocol):
    ns: str  # key namespace
    # Where components that share state across replicas (the router's load counters) keep it:
    # the store's Redis client, or None for an in-process store. ``timeout`` bounds each call.
    timeout: float

    @property
    def client(self) -> Redis | RedisCluster | None: ...

    @property
    def pipelined(self) -> Callable[[bytes], Awaitable[Any]] | None:
        """One pre-encoded command on the store's own pipelined connection to a plain Redis,
        written on the loop's next turn beside the admissions and settlements queued then, and
        bounded by ``timeout``; None where there is none (in-process, TLS, a cluster): then
        ``client`` serves."""
        ...

    async def admit(self, plan: Plan, *, tokens: int, spend: int, lease_id: str | None,
                    lease_ttl_ms: int, ticket: str) -> Admission:
        """Check every limit of every scope of ``plan``; if all pass, take one request, ``tokens``
        tokens, ``spend`` nano-USD and (when a scope limits concurrency) a lease, atomically.
        ``ticket`` (unique per call) names the admission for ``cancel``."""
        ...

    async def cancel(self, plan: Plan, *, ticket: str, tokens: int, spend: int, lease_id: str | None) -> None:
        """Undo admission ``ticket`` if it happened (its caller timed out waiting, so it may have
        run late or may still arrive: then it is refused). Idempotent."""
        ...

    async def settle(self, plan: Plan, *, admitted_ms: int, token_delta: int, spend_delta: int,
                     lease_id: str | None, record: UsageRecord, rates: bool = True,
                     refund_request: bool = False) -> None:
        """Move the reservation by the deltas (tpm only when ``rates``; quotas of the admission's
        day/month), drop the lease, append the record and add it to the aggregates.
        ``refund_request``: give the request back to the rpm limits (no model was called)."""
        ...

    def settle_nowait(self, plan: Plan, *, admitted_ms: int, token_delta: int, spend_delta: int,
                      lease_id: str | None, record: UsageRecord, rates: bool = True,
                      refund_request: bool = False) -> tuple[bool, Awaitable[None] | None]:
        """``settle`` without waiting for the store: (sent, pending). ``sent``: the command is on
        its way ahead of any later call from this replica; ``pending`` (None when already done)
        is awaited for the outcome (``StoreDown``), and does the whole call when not ``sent``."""
        ...

    async def renew(self, leases: list[tuple[Plan, str]], ttl_ms: int,
                    held: Sequence[tuple[Plan, str]] = ()) -> None:
        """Push the expiry of live leases, and of the quota reservations of live tickets
        ``held`` (plan, ticket id), ``ttl_ms`` into the future."""
        ...

    async def prepare(self) -> None:
        """Get ready to serve (load scripts) at start; never raises."""
        ...

    async def reap(self, team: str, limit: int = 1000) -> int:
        """Give back the quota reservations of ``team``'s tickets that nobody renewed in time
        (their replica died); how many. Each is given back once; its late settlement, if it
        comes, charges the whole usage."""
        ...

    async def get_docs(self, names: list[str]) -> list[dict[str, Any] | None]: ...

    async def put_doc(self, name: str, doc: dict[str, Any], ttl_ms: int | None = None) -> None:
        """Store ``doc``; with ``ttl_ms`` it vanishes that many ms later (console sessions)."""
        ...

    async def add_member(self, set_name: str, member: str) -> None: ...

    async def claim(self, name: str, ttl_ms: int) -> bool:
        """True for the one caller, across replicas, that claims ``name`` first (kept ``ttl_ms``)."""
        ...

    async def members(self, set_name: str) -> set[str]: ...

    async def audit_append(self, entry: dict[str, Any]) -> str:
        """Append an audit entry (never changed or removed after: append-only); its id, which
        sorts after every earlier entry's (as strings)."""
        ...

    async def audit_read(self, before: str | None, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` entries older than id ``before`` (None: the newest), newest first,
        each with its ``id``."""
        ...

    async def aggregates(self, team: str, days: list[int],
                         dimensions: bool = False) -> dict[int, dict[str, int]]:
        """The team's daily sums ``{day: {"<key>\x1f<model>\x1f<metric>": sum}}``; with
        ``dimensions``, its tags', end users' and sessions' (``"\x1e<dimension>:<value>"`` in the
        key's place), kept apart and for ``DIMENSION_DAYS`` days only."""
        ...

    async def minutes(self, team: str, hours: list[int]) -> dict[str, int]:
        """The team's per-minute sums in the hours (epoch hour numbers) still kept (the last
        two): {"<epoch minute>\x1f<model>\x1f<metric>": sum}."""
        ...

    async def records(self, team: str, limit: int) -> list[UsageRecord]:
        """The team's newest usage records, newest first."""
        ...

    def refuse_nowait(self, team: str, record: UsageRecord) -> Awaitable[None] | None:
        """Record a request refused before admission (no counter to move): append ``record``
        to the team's stream and add it to the day's and the minute's aggregates. Sent at once
        when it can be (None then, or a result to await for ``StoreDown``)."""
        ...

    async def count_unauthenticated(self, reason: str, now_ms: int) -> None:
        """Count a request that named no valid key, by reason only (never the key)."""
        ...

    async def unauthenticated(self, days: list[int], hours: list[int]) -> dict[str, int]:
        """Those counts: {"d<epoch day>\x1f<reason>": n, "m<epoch minute>\x1f<reason>": n}."""
        ...

    async def ping(self) -> None: ...

    async def aclose(self) -> None: ...
