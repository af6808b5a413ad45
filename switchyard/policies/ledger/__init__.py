"""The durable usage ledger: every admitted request's record, written to PostgreSQL off the hot path.

    ledger = build_ledger(config.usage, store, team_names)   # nothing connects yet
    await ledger.start()       # app startup: the feed starts draining (schema migrated on first use)
    await ledger.aclose()      # shutdown, after the policy flushed its settlements

The write-ahead buffer is the store's own: Redis's per-team record streams (``redis_feed``), or a
bounded queue in the process for memory:// (``feed.QueueFeed``). Needs the ``ledger`` extra
(asyncpg), imported only when ``usage.ledger`` is set.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from switchyard.core.settings import UsageConfig
from switchyard.policies.ledger.feed import Feed, QueueFeed
from switchyard.policies.ledger.query import LedgerUsage
from switchyard.policies.ledger.sink import PgSink
from switchyard.policies.store import Store


@dataclass(slots=True)
class Ledger:
    sink: PgSink
    feed: Feed
    usage: LedgerUsage

    async def start(self) -> None:
        self.feed.start()

    async def aclose(self) -> None:
        await self.feed.stop()
        await self.sink.aclose()


def build_ledger(cfg: UsageConfig, store: Store, teams: Callable[[], Awaitable[list[str]]]) -> Ledger:
    """The ledger for ``store``; the store's record buffer is set up to feed it."""
    from switchyard.policies.memory import MemoryStore

    assert cfg.ledger is not None
    sink = PgSink(cfg.ledger)
    feed: Feed
    if isinstance(store, MemoryStore):
        queue = QueueFeed(sink, maxlen=cfg.backlog_max, batch=cfg.batch, interval=cfg.interval)
        store.journal = queue.put
        feed = queue
    else:
        from switchyard.policies.ledger.redis_feed import RedisFeed
        from switchyard.policies.redis_store import RedisStore

        assert isinstance(store, RedisStore)
        # Acknowledged entries are trimmed by the feed; this cap only bounds a long outage.
        store.max_records = cfg.backlog_max
        feed = RedisFeed(store.client, store.ns, sink, teams, batch=cfg.batch, interval=cfg.interval,
                         claim_idle=cfg.claim_idle)
    return Ledger(sink, feed, LedgerUsage(sink))
