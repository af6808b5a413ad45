"""The ledger's PostgreSQL side alone: schema versions, idempotent batches, the hourly rollup."""

from __future__ import annotations

import asyncpg

from switchyard.policies.ledger.schema import migrate, migrations
from switchyard.policies.ledger.sink import PgSink
from switchyard.policies.store import UsageRecord

HOUR_MS = 3_600_000


def rec(i: int, *, ts_ms: int = 1_764_000_000_000, status: int = 200, ticket: str = "") -> UsageRecord:
    return UsageRecord(ts_ms=ts_ms + i, key_id="k1", team="t", model="openai/gpt-4o", deployment="d1",
                       prompt_tokens=10 + i, completion_tokens=i, cached_tokens=i % 3,
                       cost_nano=123_456_789_012 + i, status=status, latency_ms=1.5, request_id=f"r{i}",
                       ticket_id=ticket or f"t{i}", endpoint="/v1/chat/completions", dialect="chat",
                       requested_model="gpt-4o", attempts=1, ttfb_ms=-1.0, cut=i % 2 == 1)


async def test_schema_is_versioned_and_applied_once(database_url):
    conn = await asyncpg.connect(database_url)
    try:
        assert await migrate(conn) == [v for v, _, _ in migrations()]
        assert await migrate(conn) == []
        versions = [r["version"] for r in await conn.fetch("SELECT version FROM ledger_schema")]
        assert versions == [v for v, _, _ in migrations()]
    finally:
        await conn.close()


def test_each_migration_has_a_version_of_its_own():
    # Two files of one version: the second would be skipped on every database the first reached.
    versions = [v for v, _, _ in migrations()]
    assert len(versions) == len(set(versions)) and versions == list(range(1, len(versions) + 1))


async def test_a_batch_written_twice_is_stored_once(database_url):
    sink = PgSink(database_url)
    try:
        batch = [rec(i).as_fields() for i in range(50)]
        assert await sink.write(batch) == 50
        assert await sink.write(batch) == 0  # a replay: nothing new, the rollup unchanged
        assert await sink.write([*batch[40:], *[rec(i).as_fields() for i in range(50, 60)]]) == 10
        assert await sink.write([rec(60).as_fields(), rec(60).as_fields()]) == 1  # twice in one batch
        pool = await sink.pool()
        rows = await pool.fetch("SELECT * FROM usage_records ORDER BY ts")
        assert [r["ticket_id"] for r in rows] == [f"t{i}" for i in range(61)]
        first = rows[1]
        got = tuple(first[c] for c in ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_nano",
                                       "cut", "request_id"))
        assert got == (11, 1, 1, 123_456_789_013, True, "r1")
        roll = await pool.fetchrow("SELECT sum(requests) n, sum(cost_nano) c, sum(prompt_tokens) p "
                                   "FROM usage_hourly")
        assert roll["n"] == 61
        assert roll["c"] == sum(123_456_789_012 + i for i in range(61))  # exact, integer nano-USD
        assert roll["p"] == sum(10 + i for i in range(61))
        assert rows[3]["ts"].timestamp() * 1000 == rec(3).ts_ms  # to the millisecond
    finally:
        await sink.aclose()


async def test_rollup_keys_hours_in_utc_and_counts_errors(database_url):
    sink = PgSink(database_url)
    try:
        t0 = 1_764_000_000_000 - 1_764_000_000_000 % HOUR_MS
        await sink.write([rec(0, ts_ms=t0, ticket="a").as_fields(),
                          rec(0, ts_ms=t0 + HOUR_MS - 1, status=429, ticket="b").as_fields(),
                          rec(0, ts_ms=t0 + HOUR_MS, ticket="c").as_fields()])
        pool = await sink.pool()
        rows = await pool.fetch("SELECT extract(epoch FROM hour)::bigint * 1000 AS h, status, requests, "
                                "errors FROM usage_hourly ORDER BY hour, status")
        assert [tuple(r) for r in rows] == [(t0, 200, 1, 0), (t0, 429, 1, 1), (t0 + HOUR_MS, 200, 1, 0)]
    finally:
        await sink.aclose()


async def test_a_record_older_than_some_fields_takes_their_defaults(database_url):
    sink = PgSink(database_url)
    try:
        old = {k: v for k, v in rec(7).as_fields().items()
               if k not in ("requested_model", "endpoint", "dialect", "attempts", "ttfb_ms", "cut")}
        assert await sink.write([old]) == 1
        row = await (await sink.pool()).fetchrow("SELECT * FROM usage_records")
        assert (row["requested_model"], row["attempts"], row["ttfb_ms"], row["cut"]) == ("", 0, -1.0, False)
        assert row["cost_nano"] == 123_456_789_019
    finally:
        await sink.aclose()


def kept(r: UsageRecord) -> dict[str, str]:
    """What the Redis store writes of a record (name, value, name, ...: as XADD takes them)."""
    flat = r.set_fields()
    return dict(zip(flat[::2], flat[1::2], strict=True))


async def test_a_record_kept_without_its_defaults_reads_back_whole(database_url):
    """The Redis store keeps a record's ``set_fields`` only: both readers, ``from_fields`` and the
    ledger's INSERT, give the rest their defaults, so the record and its row are unchanged."""
    plain = rec(8, ticket="plain")  # ttfb -1, not cut, no reason, tags or cache hit: at their defaults
    fields = kept(plain)
    assert {"ttfb_ms", "cut", "reason", "tags", "cache_hit", "saved_nano"}.isdisjoint(fields)
    assert {"ts_ms", "key_id", "cached_tokens", "cost_nano", "deployment"} <= set(fields)
    assert UsageRecord.from_fields(fields) == plain
    hit = rec(9, ticket="hit")
    hit.cache_hit, hit.saved_tokens, hit.cut = True, 42, True
    hit_fields = kept(hit)
    assert hit_fields["cache_hit"] == "1" and UsageRecord.from_fields(hit_fields) == hit
    sink = PgSink(database_url)
    try:
        assert await sink.write([fields, hit_fields]) == 2
        pool = await sink.pool()
        for r in (plain, hit):
            row = await pool.fetchrow("SELECT * FROM usage_records WHERE ticket_id = $1", r.ticket_id)
            assert (row["ttfb_ms"], row["cut"], row["cache_hit"], row["saved_tokens"], row["reason"]) == (
                r.ttfb_ms, r.cut, r.cache_hit, r.saved_tokens, r.reason)
    finally:
        await sink.aclose()


async def test_cache_writes_are_stored_and_rolled_up(database_url):
    """002_cache_write: a record's cache_write_tokens reach usage_records and usage_hourly; a
    record written before the field existed (no such field) stores 0."""
    sink = PgSink(database_url)
    try:
        with_writes = [{**rec(i).as_fields(), "cache_write_tokens": str(100 * i)} for i in range(3)]
        older = rec(3).as_fields()
        older.pop("cache_write_tokens")
        assert await sink.write([*with_writes, older]) == 4
        pool = await sink.pool()
        rows = await pool.fetch("SELECT ticket_id, cache_write_tokens FROM usage_records ORDER BY ts")
        assert [r["cache_write_tokens"] for r in rows] == [0, 100, 200, 0]
        assert await pool.fetchval("SELECT sum(cache_write_tokens) FROM usage_hourly") == 300
        assert UsageRecord.from_fields(with_writes[2]).cache_write_tokens == 200
    finally:
        await sink.aclose()
