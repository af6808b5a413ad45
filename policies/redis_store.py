"""redis:// and redis+cluster:// -- the store every replica shares.

Admission and settlement are one EVALSHA each (falling back to EVAL when the server lost the
script); the scripts read Redis TIME, so replicas' clocks do not matter. Every key a script
touches carries the team's hash tag, so it runs in one Redis Cluster slot. Any Redis error or a
call slower than ``timeout`` becomes ``StoreDown``: no retries, no hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections import defaultdict
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError, ResponseError

from policies.plan import KINDS, Plan, tag
from policies.store import DAY_MS, Admission, StoreDown, UsageRecord, agg_increments

# Anything from the client is "the store is down" to the policy: never a 500. (redis-py's cluster
# client can also raise AttributeError on a connection it dropped mid-flight.)
_ERRORS = (RedisError, TimeoutError, OSError, AttributeError)
_KINDS = {k.encode(): k for k in (*KINDS, "too_large")}


def _arg(a: Any) -> bytes:
    return a if isinstance(a, bytes) else a.encode() if isinstance(a, str) else str(a).encode()


def resp(args: Any) -> bytes:
    """RESP-encode a command's arguments. Several times faster than redis-py's packer, and the
    static parts of a plan's calls are encoded once (``_Packed``)."""
    return b"".join(b"$%d\r\n%s\r\n" % (len(b), b) for b in map(_arg, args))


class _Packed:
    """A plan's script arguments that never change, RESP-encoded once."""

    __slots__ = ("admit_head", "keys", "plan", "settle_tail", "vector")

    def __init__(self, plan: Plan, admit_sha: str) -> None:
        self.plan = plan
        self.keys = resp(plan.keys)
        self.vector = resp(plan.vector)
        n = 3 + len(plan.keys) + 5 + len(plan.vector)
        self.admit_head = b"*%d\r\n" % n + resp(("EVALSHA", admit_sha, len(plan.keys))) + self.keys


def _script(name: str) -> tuple[str, str]:
    text = resources.files("policies").joinpath(f"scripts/{name}.lua").read_text()
    return text, hashlib.sha1(text.encode()).hexdigest()


class RedisStore:
    def __init__(self, client: Redis | RedisCluster, *, timeout: float = 0.25, ns: str = "sy",
                 max_records: int = 100_000) -> None:
        self.client = client
        self.timeout = timeout
        self.ns = ns
        self.max_records = max_records
        self.skew_ms = 0  # added to Redis TIME in the scripts; tests move the clock with it
        self._admit = _script("admit")
        self._settle = _script("settle")
        self._renew = _script("renew")
        self._loaded = False
        self._loading = asyncio.Lock()
        self._cluster = isinstance(client, RedisCluster)
        self._pack: dict[int, _Packed] = {}

    @classmethod
    def from_url(cls, url: str, *, timeout: float = 0.25, ns: str = "sy") -> RedisStore:
        opts: dict[str, Any] = dict(socket_timeout=timeout, socket_connect_timeout=timeout,
                                    retry=Retry(NoBackoff(), 0))
        if url.startswith("redis+cluster://"):
            u = urlsplit(url)
            nodes = [ClusterNode(h, int(p)) for h, _, p in (n.rpartition(":") for n in u.netloc.split(","))]
            client: Redis | RedisCluster = RedisCluster(startup_nodes=nodes, password=u.password, **opts)
        else:
            client = Redis.from_url(url, **opts)
        return cls(client, timeout=timeout, ns=ns)

    async def _call(self, *args: Any) -> Any:
        try:
            async with asyncio.timeout(self.timeout):
                return await self.client.execute_command(*args)
        except _ERRORS as e:
            raise StoreDown(f"{type(e).__name__}: {e}") from e

    async def _load_scripts(self) -> None:
        # SCRIPT LOAD up front (on every primary of a cluster): a burst of concurrent NOSCRIPT
        # replies makes redis-py's async cluster client drop connections.
        async with self._loading:
            if not self._loaded:
                for text, _ in (self._admit, self._settle, self._renew):
                    await self.client.script_load(text)
                self._loaded = True

    async def _run(self, script: tuple[str, str], keys: list[str] | tuple[str, ...], args: list[Any]) -> Any:
        try:
            async with asyncio.timeout(self.timeout):
                if not self._loaded:
                    await self._load_scripts()
                try:
                    return await self.client.execute_command("EVALSHA", script[1], len(keys), *keys, *args)
                except NoScriptError:  # a restarted or new node: load again, once
                    self._loaded = False
                    await self._load_scripts()
                    return await self.client.execute_command("EVALSHA", script[1], len(keys), *keys, *args)
        except _ERRORS as e:
            raise StoreDown(f"{type(e).__name__}: {e}") from e

    def _packed(self, plan: Plan) -> _Packed:
        p = self._pack.get(id(plan))
        if p is None or p.plan is not plan:
            if len(self._pack) > 50_000:
                self._pack.clear()
            p = self._pack[id(plan)] = _Packed(plan, self._admit[1])
        return p

    async def _send(self, packed: bytes) -> Any:
        """One packed command on a pooled connection (single-node Redis only)."""
        pool = self.client.connection_pool
        conn = await pool.get_connection()
        try:
            await conn.send_packed_command(packed, check_health=False)
            return await conn.read_response()
        except ResponseError:
            raise
        except BaseException:  # timed out or broken mid-reply: the connection's state is unknown
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)

    async def _fast(self, packed: bytes, script: tuple[str, str], keys: Any, args: list[Any]) -> Any:
        if self._cluster:
            return await self._run(script, keys, args)
        try:
            async with asyncio.timeout(self.timeout):
                if not self._loaded:
                    await self._load_scripts()
                try:
                    return await self._send(packed)
                except NoScriptError:
                    self._loaded = False
                    await self._load_scripts()
                    return await self._send(packed)
        except _ERRORS as e:
            raise StoreDown(f"{type(e).__name__}: {e}") from e

    async def admit(self, plan: Plan, *, tokens: int, spend: int, lease_id: str | None,
                    lease_ttl_ms: int) -> Admission:
        pk = self._packed(plan)
        dyn = (tokens, spend, lease_id or "", lease_ttl_ms, self.skew_ms)
        r = await self._fast(pk.admit_head + resp(dyn) + pk.vector, self._admit, plan.keys,
                             [*dyn, *plan.vector])
        if r[0] == 1:
            return Admission(True, r[1], req=(r[2], r[3], r[4]) if r[2] >= 0 else None,
                             tok=(r[5], r[6], r[7]) if r[5] >= 0 else None)
        return Admission(False, r[1], scope=r[2] - 1, kind=_KINDS[r[3]], retry_ms=r[4], limit=r[5])

    async def settle(self, plan: Plan, *, admitted_ms: int, token_delta: int, spend_delta: int,
                     lease_id: str | None, record: UsageRecord, rates: bool = True) -> None:
        aggs = agg_increments(record)
        args: list[Any] = [token_delta, spend_delta, lease_id or "", admitted_ms, 1 if rates else 0,
                           self.max_records, len(aggs), self.skew_ms, *plan.vector]
        for field, inc in aggs:
            args += (field, inc)
        for k, v in record.as_fields().items():
            args += (k, v)
        keys = [*plan.keys, plan.agg_key(record.ts_ms // DAY_MS), plan.log]
        pk = self._packed(plan)
        n = 3 + len(keys) + len(args)
        fixed, rest = args[:8], args[8 + len(plan.vector):]
        packed = (b"*%d\r\n" % n + resp(("EVALSHA", self._settle[1], len(keys))) + pk.keys
                  + resp(keys[-2:]) + resp(fixed) + pk.vector + resp(rest))
        await self._fast(packed, self._settle, keys, args)

    async def renew(self, leases: list[tuple[Plan, str]], ttl_ms: int) -> None:
        by_team: dict[str, tuple[list[str], list[Any]]] = defaultdict(lambda: ([], [ttl_ms + self.skew_ms]))
        for plan, lid in leases:
            keys, args = by_team[plan.team]
            for s in plan.scopes:
                if s.vector[2] >= 0:
                    keys.append(s.keys[2])
                    args.append(lid)
        for keys, args in by_team.values():
            await self._run(self._renew, keys, args)

    async def get_docs(self, names: list[str]) -> list[dict[str, Any] | None]:
        try:
            async with asyncio.timeout(self.timeout):
                if isinstance(self.client, RedisCluster):
                    raw = await self.client.mget_nonatomic(names)
                else:
                    raw = await self.client.mget(names)
        except _ERRORS as e:
            raise StoreDown(f"{type(e).__name__}: {e}") from e
        return [json.loads(v) if v is not None else None for v in raw]

    async def put_doc(self, name: str, doc: dict[str, Any]) -> None:
        await self._call("SET", name, json.dumps(doc))

    async def add_member(self, set_name: str, member: str) -> None:
        await self._call("SADD", set_name, member)

    async def members(self, set_name: str) -> set[str]:
        return {m.decode() for m in await self._call("SMEMBERS", set_name)}

    async def aggregates(self, team: str, days: list[int]) -> dict[int, dict[str, int]]:
        prefix = f"{self.ns}:{tag(team)}:agg"
        out: dict[int, dict[str, int]] = {}
        for day in days:  # one slot per team; a loop of HGETALLs is fine for an admin query
            raw = await self._call("HGETALL", f"{prefix}:{day}")
            if raw:
                out[day] = {k.decode(): int(v) for k, v in raw.items()}
        return out

    async def records(self, team: str, limit: int) -> list[UsageRecord]:
        log = f"{self.ns}:{tag(team)}:log"
        raw = await self._call("XREVRANGE", log, "+", "-", "COUNT", limit)
        return [UsageRecord.from_fields({k.decode(): v for k, v in fields.items()}) for _, fields in raw]

    async def ping(self) -> None:
        await self._call("PING")

    async def aclose(self) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self.client.aclose()
