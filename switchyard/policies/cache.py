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
from collections.abc import Awaitable, Callable
from dataclasses import fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import msgspec

from switchyard.core.canonical import CanonicalRequest, Chunk, FinishReason, TokenLogprob, Usage, chunk_row
from switchyard.core.logs import Throttled
from switchyard.core.settings import CacheConfig
from switchyard.dialects.defaults import sampling_defaults
from switchyard.policies.resp import ReplyError, bulk, encode

if TYPE_CHECKING:
    from redis.asyncio import Redis, RedisCluster

    from switchyard.policies.base import Principal
    from switchyard.policies.store import Store

log = logging.getLogger("switchyard")
_warn = Throttled(log, 60.0)

# Fields that do not change the answer: how it is delivered or written (stream, usage in the
# stream, base64 vectors), bookkeeping (timeout, user, the caller's spelling of a field, what the
# renderer repeats), and the model name as the caller spelt it (the resolved route stands in).
_NOT_KEYED = frozenset({"model", "dialect", "stream", "include_usage", "timeout", "user", "named", "native",
                        "as_sent", "left_out", "encoding_format"})
_KEYED_NAMES = [f.name for f in fields(CanonicalRequest) if f.name not in _NOT_KEYED]
_KEYED = attrgetter(*_KEYED_NAMES)
_AT_MESSAGES, _AT_PROMPT = _KEYED_NAMES.index("messages"), _KEYED_NAMES.index("prompt")
SEMANTIC_PER_SCOPE = 256  # prompts a scope's semantic index holds, newest first
_ENTRY_OVERHEAD = 96  # bytes counted per entry beyond its value (key, index and size fields)


# A chunk kept by position (``core.canonical.chunk_row``, as the engine pickles it): the field
# names made up most of an entry's bytes.
ChunkRow = tuple[int, str, FinishReason | None, list[TokenLogprob] | None, Usage | None, int | None,
                 str | None, list[dict[str, Any]] | None, list[TokenLogprob] | None, str | None, bool,
                 list[dict[str, Any]] | None, list[list[float]] | None, str]


class Stored(msgspec.Struct, array_like=True):
    created_ms: int  # wall clock, for the ``age`` header
    streamed: bool  # stored from a stream (its chunks are the stream's pieces)
    chunks: list[ChunkRow]


class Entry(NamedTuple):
    created_ms: int
    streamed: bool
    chunks: list[Chunk]


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Stored).decode
_key_json = msgspec.json.Encoder(order="sorted").encode
_key_pack = msgspec.msgpack.Encoder(order="sorted").encode
_SEEDED: dict[str, bytes] = {}  # a dialect's defaults, hashed (cache_key)
_blake2b = hashlib.blake2b  # 160 bits: as many as SHA-1's, in one call


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


def cache_key(req: CanonicalRequest, route: str, scope: str, *, without_prompt: bool = False) -> str:
    """The entry's name: a hash of the scope, the route and what changes the answer. The caller
    dialect's documented defaults count (the built-in engine fills unsaid fields from them).
    ``without_prompt``: the same but for the user's turn (a semantic group: same system prompt,
    route and parameters)."""
    # By position (the fields' order is this module's): a tuple is cheaper than a dict.
    # The native lane sends the caller's body as it came: its API and headers count too.
    native = (req.native.api, req.native.headers) if req.native is not None else None
    keyed: Any = _KEYED(req)
    if without_prompt:
        keyed = list(keyed)
        keyed[_AT_PROMPT] = None
        keyed[_AT_MESSAGES] = [m for m in req.messages or () if m.get("role") != "user"]
    # The dialect's defaults, hashed once: encoding them was half of the key's cost.
    seeded = _SEEDED.get(req.dialect)
    if seeded is None:
        seeded = _SEEDED[req.dialect] = _blake2b(_key_json(sampling_defaults(req.dialect))).digest()
    packed = _key_pack((seeded, scope, route, keyed, native, without_prompt))
    return _blake2b(packed, digest_size=20).hexdigest()


def semantic_text(req: CanonicalRequest) -> str | None:
    """The prompt a semantic match compares: a single-turn request's one user text, without
    tools or images. None for anything else (an agent loop, a tool call: exact matches only)."""
    if req.tools or req.tool_choice is not None or req.images or req.kind == "embedding":
        return None
    if req.kind == "completion":
        p = req.prompt
        return p[0] if p is not None and len(p) == 1 and isinstance(p[0], str) and p[0] else None
    msgs = req.messages or []
    users = [m for m in msgs if m.get("role") == "user"]
    if len(users) != 1 or any(m.get("role") not in ("user", "system", "developer") for m in msgs):
        return None
    content = users[0].get("content")
    if isinstance(content, list):  # text parts only
        if not all(isinstance(c, dict) and c.get("type") in ("text", "input_text") for c in content):
            return None
        content = "\n".join(str(c.get("text") or "") for c in content)
    return content if isinstance(content, str) and content else None


class Indexed(msgspec.Struct, array_like=True):
    """One prompt in a scope's semantic index: its group, its vector (float32), its entry's key."""

    group: str
    vector: bytes
    key: str


_encode_indexed = msgspec.msgpack.Encoder().encode
_decode_indexed = msgspec.msgpack.Decoder(Indexed).decode


def nearest(candidates: list[bytes], group: str, vector: list[float], threshold: float) -> str | None:
    """The key of the most similar prompt of ``group`` at ``threshold`` or above (vectors are unit
    length: their dot product is the cosine)."""
    import numpy as np  # the built-in embedder's extra: semantic caching needs it anyway

    best, best_key = threshold, None
    v = np.asarray(vector, dtype=np.float32)
    for raw in candidates:
        try:
            c = _decode_indexed(raw)
        except msgspec.DecodeError:
            continue
        if c.group != group:
            continue
        sim = float(np.dot(np.frombuffer(c.vector, dtype=np.float32), v))
        if sim > best or (best_key is None and sim >= best):  # ties: the newest (listed first)
            best, best_key = sim, c.key
    return best_key


def index_entry(group: str, vector: list[float], key: str) -> bytes:
    import numpy as np

    return _encode_indexed(Indexed(group, np.asarray(vector, dtype=np.float32).tobytes(), key))


_UNCLEAN = frozenset({None, "content_filter", "error"})  # a choice's last word that is not kept


def storable(chunks: list[Chunk]) -> bool:
    """An answer to keep: every choice finished, none cut by a content filter or an error."""
    finishes: dict[int, str | None] = {}
    for ch in chunks:
        if ch.embeddings is not None:
            return True
        if ch.finish_reason is not None:
            finishes[ch.index] = ch.finish_reason
        elif ch.index not in finishes and (ch.text or ch.tool_calls or ch.role or ch.logprobs):
            finishes[ch.index] = None
    return bool(finishes) and _UNCLEAN.isdisjoint(finishes.values())


def encode_entry(chunks: list[Chunk], streamed: bool) -> bytes:
    # A Stored is an array: the tuple encodes the same bytes without building one.
    return _encode((time.time_ns() // 1_000_000, streamed, list(map(chunk_row, chunks))))


def decode_entry(value: bytes) -> Entry | None:
    try:
        got = _decode(value)
    except msgspec.DecodeError:  # written by another version: a miss, overwritten by this answer
        return None
    return Entry(got.created_ms, got.streamed, [Chunk(*row) for row in got.chunks])


class Answers(Protocol):
    """Where cached answers live. Never raises: a store that fails is a miss (and no store)."""

    max_entry_bytes: int

    async def get(self, key: str) -> bytes | None: ...

    async def put(self, key: str, value: bytes, ttl_ms: int) -> bool:
        """Keep ``value`` for ``ttl_ms``; False when it is over the size limit or the store failed."""
        ...

    async def neighbours(self, scope: str) -> list[bytes]:
        """The scope's semantic index, newest first (``index_entry`` values)."""
        ...

    async def index(self, scope: str, value: bytes, ttl_ms: int) -> None:
        """Add to the scope's semantic index, keeping the newest ``SEMANTIC_PER_SCOPE``."""
        ...

    async def aclose(self) -> None: ...


class MemoryAnswers:
    """One process's cache: least recently used first out past ``max_bytes``."""

    def __init__(self, max_bytes: int, max_entry_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._index: dict[str, list[tuple[float, bytes]]] = {}

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
        entries = self._entries
        if key in entries:
            self._drop(key)
        entries[key] = (time.monotonic() + ttl_ms / 1000, value)
        self.bytes += size
        while self.bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
        return True

    def _drop(self, key: str) -> None:
        got = self._entries.pop(key, None)
        if got is not None:
            self.bytes -= len(got[1]) + _ENTRY_OVERHEAD

    async def neighbours(self, scope: str) -> list[bytes]:
        now = time.monotonic()
        return [v for until, v in self._index.get(scope, ()) if until > now]

    async def index(self, scope: str, value: bytes, ttl_ms: int) -> None:
        now = time.monotonic()
        kept = [e for e in self._index.get(scope, ()) if e[0] > now]
        self._index[scope] = [(now + ttl_ms / 1000, value), *kept][:SEMANTIC_PER_SCOPE]

    async def aclose(self) -> None:
        self._entries.clear()
        self._index.clear()
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
    """The cache every replica shares, in the store's Redis (module docstring). On a plain Redis
    without TLS its commands go pre-encoded over the store's own pipelined connection
    (``Store.pipelined``: redis-py's per-command cost was most of a miss's), so that concurrent
    requests' lookups and keeps share writes with their admissions and settlements; on a cluster
    or over TLS through redis-py."""

    def __init__(self, client: Redis | RedisCluster, *, ns: str, timeout: float, max_bytes: int,
                 max_entry_bytes: int, pipelined: Callable[[bytes], Awaitable[Any]] | None = None) -> None:
        self.client = client
        self.pipelined = pipelined
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        tag = f"{{{ns}:cache}}"
        self.prefix = f"{tag}:e:"
        self._keys = (f"{tag}:index", f"{tag}:sizes", f"{tag}:bytes")
        self._put = client.register_script(_PUT)
        # EVALSHA sha 4 <entry> <index> <sizes> <total> <member> <value> <ttl> <budget> <prefix>
        # <overhead>: all but the entry, member, value and ttl never change.
        sha = hashlib.sha1(_PUT.encode()).hexdigest()
        self._put_head = b"*13\r\n" + b"".join(bulk(a) for a in (b"EVALSHA", sha, 4))
        self._put_keys = b"".join(bulk(k) for k in self._keys)
        self._put_tail = b"".join(bulk(a) for a in (max_bytes, self.prefix, _ENTRY_OVERHEAD))
        self._get_head = b"*2\r\n" + bulk(b"GET")

    async def get(self, key: str) -> bytes | None:
        try:
            if self.pipelined is not None:
                got = await self.pipelined(self._get_head + bulk(self.prefix + key))
            else:
                async with asyncio.timeout(self.timeout):
                    got = await self.client.get(self.prefix + key)
        except Exception as e:  # a cache that fails is a miss, never an error
            _warn.warning("get", "response cache: the store failed a lookup (%s); serving a miss",
                          type(e).__name__)
            return None
        return got if isinstance(got, bytes) else None

    async def put(self, key: str, value: bytes, ttl_ms: int) -> bool:
        if len(value) > self.max_entry_bytes or len(value) + _ENTRY_OVERHEAD > self.max_bytes:
            return False
        ttl = max(int(ttl_ms), 1)
        keys = [self.prefix + key, *self._keys]
        try:
            if self.pipelined is None:
                async with asyncio.timeout(self.timeout):
                    await self._put(keys=keys,
                                    args=[key, value, ttl, self.max_bytes, self.prefix, _ENTRY_OVERHEAD])
                return True
            try:
                await self.pipelined(b"".join((self._put_head, bulk(keys[0]), self._put_keys, bulk(key),
                                               bulk(value), bulk(ttl), self._put_tail)))
            except ReplyError as e:
                if e.code != "NOSCRIPT":
                    raise
                # A Redis that restarted, or whose scripts were flushed: EVAL loads it again.
                await self.pipelined(encode((b"EVAL", _PUT, 4, *keys, key, value, ttl, self.max_bytes,
                                             self.prefix, _ENTRY_OVERHEAD)))
        except Exception as e:  # the answer was given; only its keeping failed
            _warn.warning("put", "response cache: the store failed to keep an answer (%s)", type(e).__name__)
            return False
        return True

    async def neighbours(self, scope: str) -> list[bytes]:
        try:
            async with asyncio.timeout(self.timeout):
                got = await self.client.lrange(self._scope_key(scope), 0, -1)
        except Exception as e:  # no neighbours: the exact answer stands
            _warn.warning("neighbours", "response cache: the store failed a semantic lookup (%s)",
                          type(e).__name__)
            return []
        return [g for g in got if isinstance(g, bytes)]

    async def index(self, scope: str, value: bytes, ttl_ms: int) -> None:
        name = self._scope_key(scope)
        try:
            async with asyncio.timeout(self.timeout):
                async with self.client.pipeline(transaction=False) as pipe:
                    pipe.lpush(name, value)
                    pipe.ltrim(name, 0, SEMANTIC_PER_SCOPE - 1)
                    pipe.pexpire(name, max(int(ttl_ms), 1))
                    await pipe.execute()
        except Exception as e:
            _warn.warning("index", "response cache: the store failed to index a prompt (%s)",
                          type(e).__name__)

    def _scope_key(self, scope: str) -> str:
        # The cache's hash tag: on a cluster, the index lives on the cache's slot.
        return f"{self.prefix[:-2]}s:{hashlib.blake2b(scope.encode(), digest_size=12).hexdigest()}"

    async def aclose(self) -> None:
        pass  # its connections are the store's

    async def used_bytes(self) -> int:
        """The accounted total (tests, the docs' example)."""
        return int(await self.client.get(self._keys[2]) or 0)


def open_answers(store: Store, *, max_bytes: int, max_entry_bytes: int) -> Answers:
    """The store's Redis when it has one, else this process's memory."""
    if store.client is None:
        return MemoryAnswers(max_bytes, max_entry_bytes)
    return RedisAnswers(store.client, ns=store.ns, timeout=store.timeout, max_bytes=max_bytes,
                        max_entry_bytes=max_entry_bytes, pipelined=store.pipelined)


__all__ = ["Answers", "Entry", "MemoryAnswers", "RedisAnswers", "cache_key", "decode_entry", "encode_entry",
           "open_answers", "repeatable", "scope_of", "storable"]
