"""The response cache's storage (switchyard.policies.cache) on a real Redis and in memory: TTL,
the byte budget and its eviction, the size limit; and its key."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from redis.asyncio import Redis

from switchyard.core.canonical import CanonicalRequest, Chunk, Usage
from switchyard.core.config import parse_config
from switchyard.core.settings import CacheConfig, ConfigError
from switchyard.policies.base import Principal
from switchyard.policies.cache import (
    SEMANTIC_PER_SCOPE,
    MemoryAnswers,
    RedisAnswers,
    cache_key,
    decode_entry,
    encode_entry,
    index_entry,
    nearest,
    open_answers,
    scope_of,
    semantic_text,
    storable,
)
from switchyard.policies.redis_store import RedisStore


@pytest.fixture
async def stores():
    """Each test's stores, closed after it."""
    opened: list[RedisStore] = []
    yield opened
    for store in opened:
        await store.aclose()


def redis_answers(stores: list[RedisStore], url: str, max_bytes: int, max_entry: int = 10_000,
                  timeout: float = 2.0) -> RedisAnswers:
    """The cache as the gateway opens it: on a RedisStore, over its pipelined connection."""
    store = RedisStore.from_url(url, timeout=timeout, ns=f"t{uuid.uuid4().hex[:8]}")
    stores.append(store)
    c = open_answers(store, max_bytes=max_bytes, max_entry_bytes=max_entry)
    assert isinstance(c, RedisAnswers) and c.pipelined is not None
    return c


async def test_redis_keeps_its_byte_budget_evicting_the_oldest(redis_url, stores):
    c = redis_answers(stores, redis_url, max_bytes=3 * (1000 + 96))
    for i in range(5):
        assert await c.put(f"k{i}", bytes([i]) * 1000, 60_000)
    assert await c.get("k0") is None and await c.get("k1") is None
    assert [await c.get(f"k{i}") for i in (2, 3, 4)] == [bytes([i]) * 1000 for i in (2, 3, 4)]
    assert await c.used_bytes() == 3 * 1096
    assert await c.put("k4", b"x" * 10, 60_000)  # replacing an entry counts its new size only
    assert await c.used_bytes() == 2 * 1096 + 106


async def test_redis_entries_expire_and_leave_the_budget(redis_url, stores):
    c = redis_answers(stores, redis_url, max_bytes=100_000)
    assert await c.put("short", b"a" * 500, 50)
    await asyncio.sleep(0.1)
    assert await c.get("short") is None
    assert await c.put("next", b"b" * 100, 60_000)  # the insert forgets what expired
    assert await c.used_bytes() == 196


async def test_an_answer_over_the_size_limit_is_not_kept(redis_url, stores):
    c = redis_answers(stores, redis_url, max_bytes=100_000, max_entry=1000)
    assert not await c.put("big", b"x" * 1001, 60_000)
    assert await c.get("big") is None
    m = MemoryAnswers(100_000, 1000)
    assert not await m.put("big", b"x" * 1001, 60_000) and await m.get("big") is None


async def test_a_store_that_fails_is_a_miss_not_an_error(stores):
    c = redis_answers(stores, "redis://127.0.0.1:1/0", max_bytes=10_000, max_entry=1000, timeout=0.2)
    assert await c.get("k") is None
    assert not await c.put("k", b"v", 1000)


async def test_memory_evicts_the_least_recently_used():
    m = MemoryAnswers(max_bytes=2 * (100 + 96), max_entry_bytes=1000)
    await m.put("a", b"a" * 100, 60_000)
    await m.put("b", b"b" * 100, 60_000)
    assert await m.get("a")  # a is now the most recent
    await m.put("c", b"c" * 100, 60_000)
    assert await m.get("b") is None and await m.get("a") and await m.get("c")
    assert m.bytes == 2 * 196


def test_the_key_holds_scope_route_and_what_changes_the_answer():
    req = CanonicalRequest(kind="chat", model="alias", dialect="chat", temperature=0,
                           messages=[{"role": "user", "content": "hi"}])
    alice = Principal(key_id="k1", team="t")
    bob = Principal(key_id="k2", team="t")
    carol = Principal(key_id="k3", team="u")
    team = CacheConfig(scope="team")
    base = cache_key(req, "v/m", scope_of(team, alice))
    assert cache_key(req, "v/m", scope_of(team, bob)) == base  # same team
    assert cache_key(req, "v/m", scope_of(team, carol)) != base  # never across teams
    assert cache_key(req, "v/m", scope_of(CacheConfig(scope="key"), bob)) != cache_key(
        req, "v/m", scope_of(CacheConfig(scope="key"), alice))
    assert cache_key(req, "v/other", scope_of(team, alice)) != base
    same = [CanonicalRequest(kind="chat", model="other-alias", dialect="chat", temperature=0, stream=True,
                             messages=[{"content": "hi", "role": "user"}], user="x", timeout=3)]
    changed = [CanonicalRequest(kind="chat", model="alias", dialect="chat", temperature=0, **kw)  # type: ignore[arg-type]
               for kw in ({"messages": [{"role": "user", "content": "hi!"}]},
                          {"messages": [{"role": "user", "content": "hi"}], "stop": ["x"]},
                          {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]},
                          {"messages": [{"role": "user", "content": "hi"}], "logprobs": 2})]
    assert all(cache_key(r, "v/m", scope_of(team, alice)) == base for r in same)
    assert all(cache_key(r, "v/m", scope_of(team, alice)) != base for r in changed)


def test_what_may_be_kept():
    done = [Chunk(text="a", role="assistant"), Chunk(finish_reason="stop", usage=Usage(1, 1))]
    assert storable(done)
    assert not storable([Chunk(text="a")])  # never finished
    assert not storable([Chunk(text="a", finish_reason="content_filter")])
    assert not storable([Chunk(text="a", finish_reason="stop"), Chunk(index=1, text="b")])
    assert storable([Chunk(embeddings=[[0.1, 0.2]])])
    entry = decode_entry(encode_entry(done, True))
    assert entry is not None and entry.chunks == done and entry.streamed
    assert decode_entry(b"\x00junk") is None


@pytest.mark.parametrize("mode", ["exact", "off"])
def test_a_threshold_is_for_semantic_only(mode):
    with pytest.raises(ValueError, match="semantic only"):
        CacheConfig(mode=mode, threshold=0.9)  # type: ignore[arg-type]


def test_a_semantic_group_is_the_request_but_for_the_users_turn():
    def req(user: str, system: str = "s", **kw: object) -> CanonicalRequest:
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return CanonicalRequest(kind="chat", model="m", dialect="chat", temperature=0,  # type: ignore[arg-type]
                                messages=msgs, **kw)

    def group(r: CanonicalRequest) -> str:
        return cache_key(r, "v/m", "t", without_prompt=True)

    assert group(req("a")) == group(req("b")) != group(req("a", system="other"))
    assert group(req("a")) != group(req("a", max_tokens=5))
    assert group(req("a")) != cache_key(req("a"), "v/m", "t")
    assert semantic_text(req("hello")) == "hello"
    assert semantic_text(req("hello", tools=[{"type": "function"}])) is None
    two = CanonicalRequest(kind="chat", model="m", dialect="chat", messages=[
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"}])
    assert semantic_text(two) is None


async def test_the_semantic_index_is_bounded_per_scope(redis_url, stores):
    c = redis_answers(stores, redis_url, max_bytes=100_000)
    m = MemoryAnswers(100_000, 1000)
    for store in (c, m):
        for i in range(SEMANTIC_PER_SCOPE + 10):
            await store.index("scope", index_entry("g", [1.0, 0.0], f"k{i}"), 60_000)
        got = await store.neighbours("scope")
        assert len(got) == SEMANTIC_PER_SCOPE and await store.neighbours("other") == []
        assert nearest(got, "g", [1.0, 0.0], 0.9) == f"k{SEMANTIC_PER_SCOPE + 9}"  # the newest
        assert nearest(got, "g", [0.0, 1.0], 0.9) is None and nearest(got, "h", [1.0, 0.0], 0.9) is None


async def test_redis_cluster_keeps_the_cache_on_one_slot(redis_cluster_url):
    from switchyard.policies.factory import open_store

    store = open_store(redis_cluster_url, timeout=2.0, ns=f"c{uuid.uuid4().hex[:6]}")
    c = open_answers(store, max_bytes=2 * 1096, max_entry_bytes=10_000)
    assert isinstance(c, RedisAnswers) and c.pipelined is None  # redis-py follows the slots
    for i in range(3):
        assert await c.put(f"k{i}", bytes([i]) * 1000, 60_000)
    assert await c.get("k0") is None and await c.get("k2") == bytes([2]) * 1000
    assert await c.used_bytes() == 2 * 1096
    await store.aclose()


def test_semantic_needs_an_embedder_and_a_threshold() -> None:
    dep = [{"name": "d", "base_url": "http://x/v1"}]
    with pytest.raises(ConfigError, match="needs a model served by the built-in embedder"):
        parse_config({"models": [{"name": "v/m", "cache": {"mode": "semantic", "threshold": 0.9},
                                  "deployments": dep}]})
    with pytest.raises(ConfigError, match="needs a threshold"):
        parse_config({"models": [{"name": "v/m", "cache": {"mode": "semantic"}, "deployments": dep}]})


async def test_redis_keeps_answers_after_its_scripts_are_flushed(redis_url, stores):
    c = redis_answers(stores, redis_url, max_bytes=100_000)
    assert await c.put("a", b"1", 60_000)
    await c.client.script_flush()
    assert await c.put("b", b"2", 60_000)  # NOSCRIPT: loaded again by EVAL, and kept
    assert await c.put("c", b"3", 60_000)
    assert [await c.get(k) for k in "abc"] == [b"1", b"2", b"3"]
    assert await c.used_bytes() == 3 * 97


async def test_a_redis_that_stops_answering_is_a_miss_within_the_deadline(redis_url, stores):
    """The pipelined connection keeps the deadline itself: a stalled Redis (a paused server,
    here CLIENT PAUSE) fails every waiting lookup at the store's timeout, and the next call
    opens a fresh connection."""
    c = redis_answers(stores, redis_url, max_bytes=100_000, timeout=0.3)
    assert await c.put("k", b"v", 60_000)
    admin = Redis.from_url(redis_url)
    await admin.execute_command("CLIENT", "PAUSE", 1500, "ALL")
    t0 = asyncio.get_running_loop().time()
    got = await asyncio.gather(*(c.get("k") for _ in range(5)), c.put("k2", b"w", 60_000))
    waited = asyncio.get_running_loop().time() - t0
    assert got == [None] * 5 + [False]
    assert 0.25 <= waited < 1.0, waited
    await admin.execute_command("CLIENT", "UNPAUSE")
    assert await c.get("k") == b"v"
    await admin.aclose()


def test_an_entry_keeps_every_field_of_every_chunk():
    """Entries keep chunks by position (``core.canonical.chunk_row``'s order): a field left out, or out
    of order, would come back wrong."""
    from tests.fakes.chunks import every_field_chunk

    chunks = [every_field_chunk(), Chunk(index=1, text="plain")]
    entry = decode_entry(encode_entry(chunks, True))
    assert entry is not None and entry.streamed and entry.chunks == chunks
    assert decode_entry(b"\x93\x01") is None  # another version's bytes: a miss
