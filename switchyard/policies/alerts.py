"""Alerts before a budget runs out: a webhook as each day's or month's spend or token quota fills.

Every ``alerts.interval`` seconds each replica reads the teams' settled usage (the store's daily
aggregates, as ``/admin/usage`` does) and, for every quota of a day or month (a team's, a key's, a
team's per model, per tag and per end user), every threshold it has crossed is claimed in the store
(``SET NX``, kept 40 days): the one replica that claims it sends the webhook, so each threshold is
sent once per period across replicas. Sending is retried with backoff; the body is signed
(``x-switchyard-signature: sha256=<hex HMAC-SHA256 of the body>``) and carries no secret.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import hmac
import json
import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import httpx

from switchyard.core.settings import AlertsConfig
from switchyard.core.tasks import stop
from switchyard.policies.attribution import MARK
from switchyard.policies.plan import NANO, model_limits_name
from switchyard.policies.registry import Registry
from switchyard.policies.store import SEP, Store, StoreDown

log = logging.getLogger("switchyard.alerts")

QUOTAS = ("tokens_per_day", "tokens_per_month", "spend_per_day", "spend_per_month")
MAX_TEAMS = 500  # a check reads at most this many teams' aggregates
CLAIM_MS = 40 * 86_400_000  # a claim outlives its month
MAX_DECIDED = 10_000  # claims remembered as decided (then forgotten at once, and asked again)
RETRIES = 4  # attempts per webhook
SIGNATURE = "x-switchyard-signature"
_EPOCH = dt.date(1970, 1, 1)


@dataclass(frozen=True, slots=True)
class Budget:
    """One scope's quotas, and which of a team's aggregate fields are its usage."""

    scope: str  # "team ml", "key alice", "team ml model openai/gpt-4o", "tag search", "end user u-7"
    limits: dict[str, Any]
    key: str | None = None  # the aggregate fields of this key only
    model: str | None = None  # ... of the models this per-model limit charges (model_limits_name)
    dimension: str | None = None  # ... of this tag's or end user's sums ("\x1etag:search")
    models: frozenset[str] = frozenset()  # the team's per-model limits, of which ``model`` is one


def _matches(b: Budget, k: str, m: str) -> bool:
    if b.key is not None and k != b.key:
        return False
    if b.model is not None and model_limits_name(m, b.models) != b.model:
        return False
    return b.dimension is None or k == b.dimension


@dataclass(frozen=True, slots=True)
class BudgetUse:
    """How much of one day's or month's quota is used."""

    team: str
    scope: str
    limit: str  # the quota: tokens_per_day, spend_per_month, ...
    period: str  # YYYY-MM-DD or YYYY-MM
    used: float  # USD or tokens
    limit_value: float

    @property
    def fraction(self) -> float:
        return self.used / self.limit_value if self.limit_value else 0.0


async def _team_budgets(registry: Registry, team: str, keys: list[dict[str, Any]]) -> list[Budget]:
    doc = await registry.team(team)
    out = [Budget(f"team {team}", doc["limits"] or {})]
    out += [Budget(f"key {k['id']}", k["limits"], key=k["id"]) for k in keys if k["team"] == team]
    per_model = frozenset(doc["model_limits"])
    out += [Budget(f"team {team} model {m}", lim, model=m, models=per_model)
            for m, lim in doc["model_limits"].items()]
    out += [Budget(f"tag {t}", lim, dimension=f"{MARK}tag:{t}") for t, lim in doc["tag_limits"].items()]
    if doc.get("end_user_limits"):
        out.append(Budget("end user", doc["end_user_limits"], dimension=f"{MARK}end_user:"))
    return [b for b in out if any(b.limits.get(q) for q in QUOTAS)]


async def _teams(registry: Registry, teams: Collection[str] | None) -> list[str]:
    names = await registry.team_names()
    return (names if teams is None else [t for t in names if t in teams])[:MAX_TEAMS]


def _month(today: dt.date) -> tuple[int, list[int]]:
    """Today and the days of its UTC month so far (epoch day numbers)."""
    day = (today - _EPOCH).days
    return day, list(range((today.replace(day=1) - _EPOCH).days, day + 1))


async def month_sums(store: Store, registry: Registry, today: dt.date,
                     teams: Collection[str] | None = None) -> dict[str, dict[int, dict[str, int]]]:
    """Each team's (at most ``MAX_TEAMS``; ``teams``: of these only) daily aggregates this UTC
    month so far, read once for both ``budget_use`` and ``month_spend``."""
    _, month = _month(today)
    return {team: await store.aggregates(team, month) for team in await _teams(registry, teams)}


async def budget_use(store: Store, registry: Registry, today: dt.date, *,
                     sums: dict[str, dict[int, dict[str, int]]] | None = None) -> list[BudgetUse]:
    """Every day's and month's quota of every team (at most ``MAX_TEAMS``) with what its settled
    usage has used of it (the store's daily aggregates). ``sums``: the month of some teams as
    ``month_sums`` read it (those teams, then); without it only the teams with a quota are read."""
    day, month = _month(today)
    keys = await registry.keys()
    out: list[BudgetUse] = []
    for team in sums if sums is not None else await _teams(registry, None):
        budgets = await _team_budgets(registry, team, keys)
        if not budgets:
            continue
        aggs = sums[team] if sums is not None else await store.aggregates(team, month)
        dims = (await store.aggregates(team, month, dimensions=True)
                if any(b.dimension for b in budgets) else {})
        for b in budgets:
            for q in QUOTAS:
                limit = b.limits.get(q)
                if not limit:
                    continue
                days = [day] if q.endswith("day") else month
                period = today.isoformat() if q.endswith("day") else today.isoformat()[:7]
                for scope, used in _used(b, q, days, dims if b.dimension else aggs).items():
                    out.append(BudgetUse(team, scope, q, period, used, float(limit)))
    return out


def month_spend(sums: dict[str, dict[int, dict[str, int]]], today: dt.date) -> list[dict[str, Any]]:
    """Each team's spend this UTC month so far (``sums``: as ``month_sums`` read them), and where
    it ends at the pace so far."""
    first = today.replace(day=1)
    days_in = ((first + dt.timedelta(days=32)).replace(day=1) - first).days
    out = []
    for team, aggs in sums.items():
        nano = sum(int(v) for fields in aggs.values() for f, v in fields.items()
                   if f.endswith(f"{SEP}cost_nano"))
        usd = nano / NANO
        out.append({"team": team, "spend_usd": usd, "projected_usd": usd / today.day * days_in,
                    "days": today.day, "days_in_month": days_in})
    return out


def _used(b: Budget, q: str, days: list[int], aggs: dict[int, dict[str, int]]) -> dict[str, float]:
    """Usage per scope (one, or each end user of the team) over ``days``: USD or tokens."""
    spend = q.startswith("spend")
    out: dict[str, float] = {}
    for d in days:
        for field, v in aggs.get(d, {}).items():
            k, m, metric = field.split(SEP)
            if (metric != "cost_nano") if spend else metric not in ("prompt_tokens", "completion_tokens"):
                continue
            if b.scope == "end user":  # one budget for each end user of the team
                if not k.startswith(b.dimension or ""):
                    continue
                scope = f"end user {k[len(b.dimension or ''):]}"
            elif _matches(b, k, m):
                scope = b.scope
            else:
                continue
            out[scope] = out.get(scope, 0) + (int(v) / NANO if spend else int(v))
    return out


class Alerts:
    def __init__(self, cfg: AlertsConfig, store: Store, registry: Registry) -> None:
        self.cfg = cfg
        self.store = store
        self.registry = registry
        self._task: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self._client: httpx.AsyncClient | None = None
        # Claims this replica has seen decided (won here or elsewhere): a claim stands for its
        # period, so it is not asked for again every interval.
        self._decided: set[str] = set()

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            try:
                await self.check()
            except StoreDown:
                pass  # the store's outage is logged where it is noticed
            except Exception:
                log.exception("checking budgets for alerts failed")
            await asyncio.sleep(self.cfg.interval)

    async def check(self, today: dt.date | None = None) -> int:
        """Claim and send every threshold crossed now; how many were claimed here."""
        sent = 0
        for u in await budget_use(self.store, self.registry, today or dt.datetime.now(dt.UTC).date()):
            sent += await self._crossed(u.team, u.scope, u.limit, u.period, u.used, u.limit_value)
        return sent

    async def _crossed(self, team: str, scope: str, quota: str, period: str, used: float,
                       limit: float) -> int:
        n = 0
        for t in self.cfg.thresholds:
            if used < t * limit:
                break
            name = f"{self.store.ns}:alert:{team}:{scope}:{quota}:{period}:{t:g}"
            if name in self._decided:
                continue
            won = await self.store.claim(name, CLAIM_MS)
            if len(self._decided) >= MAX_DECIDED:
                self._decided.clear()
            self._decided.add(name)
            if won:
                n += 1
                body = self._body(scope, quota, period, t, used, limit)
                task = asyncio.ensure_future(self._send(body))
                self._sends.add(task)
                task.add_done_callback(self._sends.discard)
        return n

    def _body(self, scope: str, quota: str, period: str, threshold: float, used: float,
              limit: float) -> bytes:
        unit = "USD" if quota.startswith("spend") else "tokens"
        if self.cfg.format == "slack":
            text = (f":warning: {scope}: {threshold:.0%} of its {quota} reached for {period} "
                    f"({used:g} of {limit:g} {unit})")
            return json.dumps({"text": text}).encode()
        return json.dumps({"type": "budget_threshold", "scope": scope, "limit": quota,
                           "threshold": threshold, "used": used, "limit_value": limit, "unit": unit,
                           "period": period}).encode()

    async def _send(self, body: bytes) -> None:
        headers = {"content-type": "application/json"}
        if self.cfg.secret:
            sig = hmac.new(self.cfg.secret.encode(), body, hashlib.sha256).hexdigest()
            headers[SIGNATURE] = f"sha256={sig}"
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=10.0)
        for attempt in range(RETRIES):
            try:
                r = await self._client.post(self.cfg.webhook, content=body, headers=headers)
                if r.status_code < 300:
                    return
                why = f"status {r.status_code}"
            except httpx.HTTPError as e:
                why = type(e).__name__
            if attempt + 1 < RETRIES:
                await asyncio.sleep(0.5 * 2 ** attempt)
        log.warning("alert webhook failed %d times (%s); this alert is not sent again", RETRIES, why)

    async def flush(self) -> None:
        """Wait for the webhooks being sent (tests, shutdown)."""
        while self._sends:
            await asyncio.gather(*list(self._sends), return_exceptions=True)

    async def aclose(self) -> None:
        await stop(self._task)
        await self.flush()
        if self._client is not None:
            await self._client.aclose()
