"""Writing usage records into PostgreSQL: one statement per batch, idempotent on the ticket id.

The statement inserts the batch into ``usage_records`` (``ON CONFLICT DO NOTHING``) and adds the
rows that were really inserted to ``usage_hourly``, atomically: a batch written twice (a replay
after a crash between the commit and the XACK) changes nothing the second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from switchyard.core.errors import Unavailable
from switchyard.policies.ledger.schema import migrate

log = logging.getLogger("switchyard.ledger")

COLUMNS = ("ticket_id", "ts", "request_id", "key_id", "team", "model", "requested_model", "deployment",
           "endpoint", "dialect", "status", "prompt_tokens", "completion_tokens", "cached_tokens",
           "cost_nano", "latency_ms", "ttfb_ms", "attempts", "cut", "reason", "cache_write_tokens",
           "unpriced", "tags", "end_user", "session", "guardrails", "cache_hit", "saved_tokens", "saved_nano")
# The batch travels as one JSON array of records' fields, as strings, exactly as the store keeps
# them (``UsageRecord.as_fields``): PostgreSQL converts them, so the gateway's process does
# next to no work per row. Fields a record lacks (older records) take their defaults.
_FIELDS = ("ticket_id text, ts_ms bigint, request_id text, key_id text, team text, model text, "
           "requested_model text, deployment text, endpoint text, dialect text, status smallint, "
           "prompt_tokens bigint, completion_tokens bigint, cached_tokens bigint, cost_nano bigint, "
           "latency_ms float8, ttfb_ms float8, attempts smallint, cut boolean, reason text, "
           "cache_write_tokens bigint, unpriced boolean, tags text, end_user text, session text, "
           "guardrails text, cache_hit boolean, saved_tokens bigint, saved_nano bigint")
_VALUES = ("ticket_id, 'epoch'::timestamptz + ts_ms * interval '1 millisecond', "
           "coalesce(request_id, ''), key_id, team, model, coalesce(requested_model, ''), "
           "coalesce(deployment, ''), coalesce(endpoint, ''), coalesce(dialect, ''), status, "
           "prompt_tokens, completion_tokens, coalesce(cached_tokens, 0), cost_nano, latency_ms, "
           "coalesce(ttfb_ms, -1), coalesce(attempts, 0), coalesce(cut, false), coalesce(reason, ''), "
           "coalesce(cache_write_tokens, 0), coalesce(unpriced, false), coalesce(tags, ''), "
           "coalesce(end_user, ''), coalesce(session, ''), coalesce(guardrails, ''), "
           "coalesce(cache_hit, false), coalesce(saved_tokens, 0), coalesce(saved_nano, 0)")
_GROUP = "hour, team, key_id, model, deployment, status, reason"
_MGROUP = "minute, team, key_id, model, status, reason"
_SUMS = ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_nano", "latency_ms",
         "cache_write_tokens", "saved_tokens", "saved_nano")
# Refused: a 4xx answered without calling a model (store.refused).
_COUNTS = ("count(*), count(*) FILTER (WHERE status >= 400), "
           "count(*) FILTER (WHERE status BETWEEN 400 AND 499 AND attempts = 0), "
           "count(*) FILTER (WHERE unpriced), count(*) FILTER (WHERE cache_hit)")
_COUNTED = "requests, errors, refused, unpriced, cache_hits"
_ADD = ", ".join(f"{c} = {{t}}.{c} + excluded.{c}" for c in (*_COUNTED.split(", "), *_SUMS))

INSERT = f"""
WITH batch AS (
  SELECT DISTINCT ON (ticket_id) {_VALUES} FROM json_to_recordset($1::json) AS b({_FIELDS})
), ins AS (
  INSERT INTO usage_records ({", ".join(COLUMNS)}) SELECT * FROM batch
  ON CONFLICT (ticket_id) DO NOTHING
  RETURNING *
), roll AS (
  INSERT INTO usage_hourly ({_GROUP}, {_COUNTED}, {", ".join(_SUMS)})
  SELECT date_trunc('hour', ts, 'UTC') AS hour, team, key_id, model, deployment, status, reason,
         {_COUNTS}, {", ".join(f"sum({c})" for c in _SUMS)}
  FROM ins GROUP BY {_GROUP} ORDER BY {_GROUP}
  ON CONFLICT ({_GROUP}) DO UPDATE SET {_ADD.format(t="usage_hourly")}
  RETURNING 1
), rollm AS (
  INSERT INTO usage_minute ({_MGROUP}, {_COUNTED}, {", ".join(_SUMS)})
  SELECT date_trunc('minute', ts) AS minute, team, key_id, model, status, reason,
         {_COUNTS}, {", ".join(f"sum({c})" for c in _SUMS)}
  FROM ins GROUP BY {_MGROUP} ORDER BY {_MGROUP}
  ON CONFLICT ({_MGROUP}) DO UPDATE SET {_ADD.format(t="usage_minute")}
  RETURNING 1
)
SELECT count(*) FROM ins
"""

Fields = dict[str, str]
PRUNE_EVERY_S = 600.0


class PgSink:
    """The ledger's PostgreSQL side: a small pool, the schema, the batch insert."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout
        self._pool: Any = None
        self._opening = asyncio.Lock()
        self._prune_at = 0.0

    async def pool(self) -> Any:
        """The connection pool, opened (and the schema migrated) on first use."""
        async with self._opening:
            return self._pool or await self._open()

    async def _open(self) -> Any:
        if self._pool is None:
            import asyncpg  # the ``ledger`` extra: imported only when a ledger is configured

            pool = await asyncpg.create_pool(self.url, min_size=1, max_size=4, timeout=self.timeout,
                                             command_timeout=self.timeout,
                                             server_settings={"timezone": "UTC"})
            try:
                async with pool.acquire() as conn:
                    applied = await migrate(conn)
            except BaseException:
                await pool.close()
                raise
            if applied:
                log.info("usage ledger: schema migrations %s applied", applied)
            self._pool = pool
        return self._pool

    async def write(self, records: list[Fields]) -> int:
        """Insert records (their fields, as ``UsageRecord.as_fields`` gives them, with a non-empty
        ``ticket_id``); the number of rows new to the ledger. Raises on any database error (the
        caller keeps the batch and tries again)."""
        if not records:
            return 0
        payload = msgspec.json.encode(records).decode()
        pool = await self.pool()
        async with pool.acquire() as conn:
            n = int(await conn.fetchval(INSERT, payload))
            now = time.monotonic()
            if now >= self._prune_at:  # the minute rollup keeps two days
                self._prune_at = now + PRUNE_EVERY_S
                await conn.execute("DELETE FROM usage_minute WHERE minute < now() - interval '2 days'")
            return n

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[Any]:
        """A connection for an admin read; the ledger out of reach is a 503, not a 500."""
        try:
            pool = await self.pool()
            async with pool.acquire() as conn:
                yield conn
        except (OSError, TimeoutError) as e:
            raise Unavailable(f"the usage ledger is unavailable: {type(e).__name__}",
                              headers={"Retry-After": "1"}) from e
        except Exception as e:
            if type(e).__module__.startswith("asyncpg") and not _is_query_error(e):
                raise Unavailable(f"the usage ledger is unavailable: {type(e).__name__}",
                                  headers={"Retry-After": "1"}) from e
            raise

    async def aclose(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()


def _is_query_error(e: Exception) -> bool:
    """A bug in a query (syntax, types), as opposed to a server that is down or restarting."""
    sqlstate = getattr(e, "sqlstate", None) or ""
    return sqlstate[:2] in ("42", "22")
