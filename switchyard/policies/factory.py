"""Everything the gateway needs from policies, built from the config in one call.

    policies = build_policies(config)
    app = Litestar(..., on_startup=[policies.start], on_shutdown=[policies.aclose])
    principal = await policies.keys.lookup(raw_key)            # None -> 401
    ticket = await policies.policy.admit(principal, model, prompt_tokens=n, max_tokens=m,
                                         fail_open=deployment.on_store_error == "open")
    try: ... finally: await policies.policy.settle(ticket, Outcome(usage, status, ...))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from switchyard.core.config import Config
from switchyard.policies.alerts import Alerts
from switchyard.policies.audit import AuditLog
from switchyard.policies.cache import Answers, open_answers
from switchyard.policies.keys import KeyRing
from switchyard.policies.limits import Limiter
from switchyard.policies.memory import MemoryStore
from switchyard.policies.pricing import Pricing
from switchyard.policies.refusals import Refusals
from switchyard.policies.registry import Registry
from switchyard.policies.sqlite_store import SqliteStore, path_of
from switchyard.policies.store import Store
from switchyard.policies.usage import UsageQuery, UsageSource

if TYPE_CHECKING:
    from switchyard.policies.ledger import Ledger


def open_store(url: str, *, timeout: float = 0.25, ns: str = "sy", admin_timeout: float = 5.0) -> Store:
    """sqlite:// -> in-process, the admin state in a file; memory:// -> in-process, nothing kept;
    redis://, rediss:// -> Redis; redis+cluster:// -> Redis Cluster."""
    if url.startswith("memory://"):
        return MemoryStore(ns=ns)
    if url.startswith("sqlite://"):
        return SqliteStore(path_of(url), ns=ns, timeout=admin_timeout)
    from switchyard.policies.redis_store import RedisStore  # redis is only imported when used

    return RedisStore.from_url(url, timeout=timeout, ns=ns, admin_timeout=admin_timeout)


def state_kept(url: str) -> str | None:
    """Where what the admin API changes (keys, teams, limits, revocations) outlives a restart;
    None where it does not (memory://)."""
    if url.startswith("memory://"):
        return None
    if url.startswith("sqlite://"):
        return str(path_of(url).absolute())
    return "redis"


NOT_KEPT = ("store.url is memory://: keys, teams, limits and revocations made through the admin "
            "API or the console are lost when the gateway stops (use sqlite:// or redis://)")


@dataclass(slots=True)
class Policies:
    config: Config
    store: Store
    keys: KeyRing
    policy: Limiter
    registry: Registry
    usage: UsageSource
    refusals: Refusals
    audit: AuditLog
    answers: Answers  # the response cache (docs/cache.md)
    ledger: Ledger | None = None
    alerts: Alerts | None = None  # webhooks as budgets fill (config.alerts)
    owns_store: bool = True  # False once a reload handed the store (and the cache) on to the next

    async def start(self) -> None:
        """Background work that needs the event loop (the ledger's feed)."""
        await self.store.prepare()
        self.policy.start()
        if self.ledger is not None:
            await self.ledger.start()
        if self.alerts is not None:
            self.alerts.start()

    async def aclose(self) -> None:
        await self.policy.aclose()  # settlements reach the store first, then the ledger drains
        await self.refusals.flush()
        if self.alerts is not None:
            await self.alerts.aclose()
        if self.ledger is not None:
            await self.ledger.aclose()
        if self.owns_store:
            await self.answers.aclose()
            await self.store.aclose()


def build_policies(config: Config, *, ns: str = "sy", key_cache_ttl: float = 1.0,
                   lease_ttl_ms: int | None = None, store: Store | None = None,
                   answers: Answers | None = None) -> Policies:
    """Nothing connects here: the Redis client connects lazily on first use. ``store`` and
    ``answers``: those already open for this config's ``store`` section (a reload keeps its
    counters, its pool and, on memory://, the cached answers)."""
    store = store or open_store(config.store.url, timeout=config.store.timeout, ns=ns,
                                admin_timeout=config.store.admin_timeout)
    keys = KeyRing.from_config(config, store=store, ttl=key_cache_ttl)
    registry = Registry(config, store, keys)
    policy = Limiter(store, Pricing(config),
                     lease_ttl_ms=lease_ttl_ms or round(config.store.lease_ttl * 1000))
    policy.teams = registry.team_names
    ledger = None
    usage: UsageSource = UsageQuery(store, registry)
    if config.usage.ledger:
        from switchyard.policies.ledger import build_ledger  # asyncpg: the ``ledger`` extra

        ledger = build_ledger(config.usage, store, registry.team_names)
        usage = ledger.usage
    alerts = Alerts(config.alerts, store, registry) if config.alerts is not None else None
    audit = AuditLog(store, sink=ledger.sink if ledger is not None else None,
                     retention_days=config.audit.retention_days)
    if answers is None:
        answers = open_answers(store, max_bytes=config.store.cache_max_bytes,
                               max_entry_bytes=config.store.cache_max_entry_bytes)
    return Policies(config=config, store=store, keys=keys, policy=policy, registry=registry,
                    usage=usage, refusals=Refusals(store), audit=audit, answers=answers, ledger=ledger,
                    alerts=alerts)
