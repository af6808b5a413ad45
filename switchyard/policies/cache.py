"""The response cache's storage and key (docs/cache.md).

An entry is one whole answer as the backend produced it, canonical chunks before any dialect
rendered them, so that a hit can be rendered in any dialect, as a stream or whole. It lives in the
policy store, so every replica and worker shares it:

- ``RedisAnswers``: one string per entry with a TTL, and the cache's own byte accounting (a sorted
  set of entries by expiry and a total) so that its budget holds whatever Redis's ``maxmemory``
  says; an insert first forgets expired entries, then evicts those closest to expiry until the
  total fits. Every key carries one hash tag: the script runs in one Redis Cluster slot.
- ``MemoryAnswers``: one process, least recently used first past the budget.

The key hashes the scope (key, team or global: never shared across it), the route and every
field of the canonical request that changes the answer; what does not (the request id, stream or
not, how the answer is written) is left out.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from switchyard.core.canonical import CanonicalRequest, Chunk
from switchyard.core.logs import Throttled
from switchyard.core.settings import CacheConfig
from switchyard.dialects.defaults import sampling_defaults
from switchyard.policies.resp import ReplyError, RespConnection, encode

if TYPE_CHECKING:
    from redis.asyncio import Redis, RedisCluster

    from switchyard.policies.base import Principal

log = logging.getLogger("switchyard")
_warn = Throttled(log, 60.0)

# Fields that do not change the answer: how it is delivered or written (stream, usage in the
# stream, base64 vectors), bookkeeping (timeout, user, the caller's spelling of a field, what the
# renderer repeats), and the model name as the caller spelt it (the resolved route stands in).
_NOT_KEYED = frozenset({"model", "dialect", "stream", "include_usage", "timeout", "user", "named", "native",
                        "as_sent", "left_out", "encoding_format"})
_KEYED = attrgetter(*(f.name for f in fields(CanonicalRequest) if f.name not in _NOT_KEYED))
_ENTRY_OVERHEAD = 96  # bytes counted per entry beyond its value (key, index and size fields)


class Entry(msgspec.Struct, array_like=True):
    created_ms: int  # wall clock, for the ``age`` header
    streamed: bool  # stored from a stream (its chunks are the stream's pieces)
    chunks: list[Chunk]


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Entry).decode
_key_json = msgspec.json.Encoder(order="sorted").encode


def repeatable(req: CanonicalRequest) -> bool:
    """A request whose answer can repeat: an embedding, or one choice sampled greedily
    (temperature 0) or from a seed. Another sample of a random answer is what such a caller wants."""
    if req.kind == "embedding":
        return True
    if (req.n or 1) != 1 or (req.best_of or 1) != 1 or (req.prompt is not None and len(req.prompt) != 1):
        return False
    return req.temperature == 0 or req.seed is not None


def scope_of(rule: CacheConfig, principal: Principal) -> str:
    if rule.scope == "global":
        return "g"
    return f"k\x1f{principal.key_id}" if rule.scope == "key" else f"t\x1f{principal.team}"


def cache_key(req: CanonicalRequest, route: str, scope: str) -> str:
    """The entry's name: a hash of the scope, the route and what changes the answer. The caller
    dialect's documented defaults count (the built-in engine fills unsaid fields from them)."""
    # By position (the fields' order is this module's): a tuple is cheaper than a dict.
    # The native lane sends the caller's body as it came: its API and headers count too.
    native = (req.native.api, req.native.headers) if req.native is not None else None
    doc = (scope, route, _KEYED(req), sampling_defaults(req.dialect), native)
    return hashlib.blake2b(_key_json(doc), digest_size=20).hexdigest()


def storable(chunks: list[Chunk]) -> bool:
    """An answer to keep: every choice finished, none cut by a content filter or an error."""
    finishes: dict[int, str | None] = {}
    vectors = False
    for ch in chunks:
        if ch.embeddings is not None:
            vectors = True
        if ch.finish_reason is not None:
            finishes[ch.index] = ch.finish_reason
        elif ch.index not in finishes and (ch.text or ch.tool_calls or ch.role or ch.logprobs):
            finishes[ch.index] = None
    if vectors:
        return True
    return bool(finishes) and all(f is not None and f not in ("content_filter", "error")
                                  for f in finishes.values())


def encode_entry(chunks: list[Chunk], streamed: bool) -> bytes:
    return _encode(Entry(int(time.time() * 1000), streamed, chunks))


def decode_entry(value: bytes) -> Entry | None:
    try:
        return _decode(value)
    except msgspec.DecodeError:  # written by another version: a miss, overwritten by this answer
        return None


class Answers(Protocol):
    """Where cached answers live. Never raises: a store that fails is a miss (and no store)."""

    max_entry_bytes: int

    async def get(self, key: str) -> bytes | None: ...

    async def put(self, key: str, value: bytes, ttl_ms: int) -> bool:
        """Keep ``value`` for ``ttl_ms``; False when it is over the size limit or the store failed."""
        ...

    async def aclose(self) -> None: ...


class MemoryAnswers:
    """One process's cache: least recently used first out past ``max_bytes``."""

    def __init__(self, max_bytes: int, max_entry_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    async def get(self, key: str) -> bytes | None:
        got = self._entries.get(key)
        if got is None:
            return None
        if got[0] <= time.monotonic():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return got[1]

    async def put(self, key: str, value: bytes, ttl_ms: int) -> bool:
        size = len(value) + _ENTRY_OVERHEAD
        if len(value) > self.max_entry_bytes or size > self.max_bytes:
            return False
        self._drop(key)
        self._entries[key] = (time.monotonic() + ttl_ms / 1000, value)
        self.bytes += size
        while self.bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
        return True

    def _drop(self, key: str) -> None:
        got = self._entries.pop(key, None)
        if got is not None:
            self.bytes -= len(got[1]) + _ENTRY_OVERHEAD

    async def aclose(self) -> None:
        self._entries.clear()
        self.bytes = 0


# KEYS: the entry, the index (member -> expiry ms), the sizes (member -> bytes), the total.
# ARGV: member, value, ttl ms, budget, the entries' key prefix, the overhead per entry.
_PUT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local total = tonumber(redis.call('GET', KEYS[4]) or '0')
local function forget(m)
  total = total - tonumber(redis.call('HGET', KEYS[3], m) or '0')
  redis.call('HDEL', KEYS[3], m)
  redis.call('ZREM', KEYS[2], m)
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 64)) do forget(m) end
forget(ARGV[1])
local size = #ARGV[2] + tonumber(ARGV[6])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], size)
total = total + size
local budget = tonumber(ARGV[4])
while total > budget do
  local o = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #o == 0 then break end
  forget(o[1])
  -- the same hash tag as KEYS: the same slot
  redis.call('DEL', ARGV[5] .. o[1])
end
redis.call('SET', KEYS[4], math.max(total, 0))
return 1
"""


class RedisAnswers:
    """The cache every replica shares, in the store's Redis (module docstring). A plain Redis
    without TLS is spoken to over one pipelined connection of its own (``policies/resp.py``:
    redis-py's per-command cost was most of a miss's); a cluster or TLS through redis-py."""

    def __init__(self, client: Redis | RedisCluster, *, ns: str, timeout: float, max_bytes: int,
                 max_entry_bytes: int) -> None:
        self.client = client
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        tag = f"{{{ns}:cache}}"
        self.prefix = f"{tag}:e:"
        self._keys = (f"{tag}:index", f"{tag}:sizes", f"{tag}:bytes")
        self._put = client.register_script(_PUT)
        self._sha = hashlib.sha1(_PUT.encode()).hexdigest()
        self._fast: RespConnection | None = None
        self._opening = asyncio.Lock()
        from redis.asyncio import Redis  # only with a Redis store
        from redis.asyncio.connection import Connection, UnixDomainSocketConnection

        self._endpoint: dict[str, Any] | None = None
        if isinstance(client, Redis) and client.connection_pool.connection_class in (
                Connection, UnixDomainSocketConnection):  # plain TCP or a socket; TLS: redis-py
            self._endpoint = client.connection_pool.connection_kwargs

    async def _conn(self) -> RespConnection:
        c = self._fast
        if c is not None and not c.lost:
            return c
        async with self._opening:
            if self._fast is None or self._fast.lost:
                kw = self._endpoint or {}
                self._fast = await RespConnection.open(
                    kw.get("host", "localhost"), int(kw.get("port", 6379)), path=kw.get("path"),
                    username=kw.get("username"), password=kw.get("password"), db=kw.get("db") or 0)
            return self._fast

    async def _command(self, *args: Any) -> Any:
        c = await self._conn()
        return await c.request(encode(args))

    async def get(self, key: str) -> bytes | None:
        try:
            async with asyncio.timeout(self.timeout):
                if self._endpoint is not None:
                    got = await self._command(b"GET", self.prefix + key)
                else:
                    got = await self.client.get(self.prefix + key)
        except Exception as e:  # a cache that fails is a miss, never an error
            _warn.warning("get", "response cache: the store failed a lookup (%s); serving a miss",
                          type(e).__name__)
            return None
        return got if isinstance(got, bytes) else None

    async def put(self, key: str, value: bytes, ttl_ms: int) -> bool:
        if len(value) > self.max_entry_bytes or len(value) + _ENTRY_OVERHEAD > self.max_bytes:
            return False
        keys = [self.prefix + key, *self._keys]
        args: list[str | bytes | int] = [key, value, max(int(ttl_ms), 1), self.max_bytes, self.prefix,
                                         _ENTRY_OVERHEAD]
        try:
            async with asyncio.timeout(self.timeout):
                if self._endpoint is None:
                    await self._put(keys=keys, args=args)
                    return True
                try:
                    await self._command(b"EVALSHA", self._sha, len(keys), *keys, *args)
                except ReplyError as e:
                    if e.code != "NOSCRIPT":
                        raise
                    await self._command(b"EVAL", _PUT, len(keys), *keys, *args)  # loads it too
        except Exception as e:  # the answer was given; only its keeping failed
            _warn.warning("put", "response cache: the store failed to keep an answer (%s)", type(e).__name__)
            return False
        return True

    async def aclose(self) -> None:
        if self._fast is not None:
            self._fast.close()
            self._fast = None

    async def used_bytes(self) -> int:
        """The accounted total (tests, the docs' example)."""
        return int(await self.client.get(self._keys[2]) or 0)


def open_answers(client: Redis | RedisCluster | None, *, ns: str, timeout: float, max_bytes: int,
                 max_entry_bytes: int) -> Answers:
    """The store's Redis when it has one, else this process's memory."""
    if client is None:
        return MemoryAnswers(max_bytes, max_entry_bytes)
    return RedisAnswers(client, ns=ns, timeout=timeout, max_bytes=max_bytes, max_entry_bytes=max_entry_bytes)


__all__ = ["Answers", "Entry", "MemoryAnswers", "RedisAnswers", "cache_key", "decode_entry", "encode_entry",
           "open_answers", "repeatable", "scope_of", "storable"]
