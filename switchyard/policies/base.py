"""The seam between the gateway and its policies: who is calling, and may they spend this.

The gateway calls ``Policy.admit`` once per request (one store round trip covering every limit
of the key, its team and the (team, model) pair) and ``Policy.settle`` exactly once when the
request ends, however it ends, with the real usage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from switchyard.core.canonical import Usage
from switchyard.core.settings import CacheConfig, Limits
from switchyard.policies.attribution import NONE, Attribution

if TYPE_CHECKING:
    from switchyard.policies.pricing import RoutePrices


@dataclass(slots=True, frozen=True)
class Principal:
    """An authenticated caller: a key and the team it belongs to."""

    key_id: str
    team: str
    key_limits: Limits = field(default_factory=Limits)
    team_limits: Limits = field(default_factory=Limits)
    team_model_limits: dict[str, Limits] = field(default_factory=dict)
    team_end_user_limits: Limits | None = None  # for each end user of the team
    team_tag_limits: dict[str, Limits] = field(default_factory=dict)
    key_models: frozenset[str] | None = None  # None = any model
    team_models: frozenset[str] | None = None
    strict: bool = False
    default_model: str | None = None
    timeout: float | None = None
    expires_ms: int | None = None  # wall-clock epoch ms after which the key is refused (401)
    # The response cache's rule of the key, else of its team (None: the model's applies), chosen
    # once when the principal is made, not per request.
    cache: CacheConfig | None = None

    def may_use(self, model: str) -> bool:
        keys, teams = self.key_models, self.team_models  # (no generator: this runs per request)
        return (keys is None or model_allowed(model, keys)) and (teams is None or model_allowed(model, teams))


def model_allowed(model: str, allowed: frozenset[str]) -> bool:
    # Exactly what the list names, or "vendor/*" (the vendor's every model). No prefix rule: a
    # pinned deployment is checked under its group's name (``Route.group``), and under a
    # ``vendor/*`` route "vendor/allowed/other" is another upstream model, not "vendor/allowed".
    return model in allowed or f"{model.partition('/')[0]}/*" in allowed


@dataclass(slots=True)
class Ticket:
    """What ``admit`` hands back: enough to settle the request later, and the headers to send."""

    principal: Principal
    model: str
    reserved_tokens: int
    id: str = ""  # unique per admission: the usage record's ticket_id, and the lease's id
    # The configured name usage is aggregated under: ``model`` itself, except that a wildcard
    # route's callers may name any model, and they must not mint aggregate fields at will.
    group: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    lease_id: str | None = None
    started: float = 0.0  # time.monotonic() at admission
    settled: bool = False
    prompt_tokens: int = 0  # as counted before the call
    reserved_spend: int = 0  # nano-USD held against spend quotas
    admitted_ms: int = 0  # the store's clock (Redis TIME) at admission; dates the usage record
    plan: Any = None  # policies.plan.Plan: the counters to settle
    local: bool = False  # admitted by the in-process fallback while the store was down (fail-open)
    max_tokens: int | None = None  # completion tokens per choice admitted (sent upstream as max_tokens)
    lowered: bool = False  # max_tokens is lower than asked: a quota could not hold the request whole
    prices: RoutePrices | None = None  # the route's prices (resolved once per route, not per request)
    attribution: Attribution = NONE  # tags, end user, session
    # (the fields above are what ``Limiter.admit`` gives, by position; the ones below, settling)
    cost_nano: int = 0  # what was charged, once settled
    unpriced: bool = False  # settled, and the deployment that served it has no known price
    saved_nano: int = 0  # a cache hit, once settled: what its answer would have cost (the ledger's)


@dataclass(slots=True)
class Outcome:
    """How a request ended, for its settlement and usage record.

    ``usage`` is what to charge: what the backend reported it billed, else what was counted,
    and nothing for a request that failed before any token. ``called`` is False when no model
    was called at all (the gateway refused after admission): the request is given back to the
    rpm limits too.
    """

    usage: Usage
    status: int
    called: bool = True
    deployment: str = ""
    latency_ms: float = 0.0
    ttfb_ms: float = -1.0
    attempts: int = 0
    cut: bool = False
    request_id: str = ""
    endpoint: str = ""
    dialect: str = ""
    requested_model: str = ""
    reason: str = ""  # what failed, for an error (``switchyard.policies.refusals.reason_of``)
    guardrails: str = ""  # the guards that acted, "<name>:<action>,..." (never what they matched)
    # Answered from the response cache: ``usage`` is nothing; ``saved`` is the original answer's.
    cache_hit: bool = False
    saved: Usage | None = None


class Policy(Protocol):
    async def admit(self, principal: Principal, model: str, *, prompt_tokens: int,
                    max_tokens: int | None, fail_open: bool = False, group: str | None = None,
                    choices: int = 1, upstream_model: str | None = None,
                    attribution: Attribution = NONE) -> Ticket:
        """Reserve ``prompt_tokens + max_tokens * choices`` and a request against every applicable
        limit, all or nothing; a quota that cannot hold that may admit a lower ``max_tokens``
        (``Ticket.max_tokens``, ``Ticket.lowered``). Raises ``switchyard.core.errors.RateLimited``
        (429, naming the limit, with Retry-After) or ``Unavailable`` (503) when the store is down
        and ``fail_open`` is false."""
        ...

    async def settle(self, ticket: Ticket, outcome: Outcome) -> None:
        """Replace the reservation by the real usage, release the concurrency slot, write the
        usage record and aggregates. Idempotent: a second call does nothing."""
        ...
