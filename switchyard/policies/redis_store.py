"""redis:// and redis+cluster:// -- the store every replica shares.

Admission and settlement are one EVALSHA each (falling back to EVAL when the server lost the
script); the scripts read Redis TIME, so replicas' clocks do not matter. Every key a script
touches carries the team's hash tag, so it runs in one Redis Cluster slot. Any Redis error or a
call slower than ``timeout`` becomes ``StoreDown``: no hangs, and one retry only where a
connection was found dead (a Redis restart), which every command here survives being run twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import msgspec
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError

from switchyard.policies.plan import KINDS, Plan, resv_keys, tag
from switchyard.policies.resp import ReplyError, RespConnection, bulk, bulks, encode
from switchyard.policies.store import (
    AUDIT_KEPT,
    DAY_MS,
    HOUR_MS,
    MINUTE_MS,
    Admission,
    StoreDown,
    StoreSlow,
    UsageRecord,
    agg_increments,
    audit_id,
)

# Anything from the client is "the store is down" to the policy: never a 500. (redis-py's cluster
# client can also raise AttributeError on a connection it dropped mid-flight.)
_ERRORS = (RedisError, TimeoutError, OSError, AttributeError, ReplyError)
# Error replies that mean "ask the cluster client": it follows the redirect and refreshes its map.
_REDIRECTS = {"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"}
_KINDS = {k.encode(): k for k in (*KINDS, "too_large", "cancelled")}


# A settlement's aggregate increments and its record travel as one msgpack argument each (the
# scripts unpack them with cmsgpack): two bulk strings, not one per field and value.
_msgpack = msgspec.msgpack.Encoder().encode
_NONE = _msgpack([])  # a cancellation's: it records nothing


def _packed_record(record: UsageRecord) -> tuple[bytes, bytes]:
    """The two arguments that say what a request adds: its aggregate increments and its record."""
    return _msgpack(agg_increments(record)), _msgpack(record.set_fields())


class _Packed:
    """A plan's script arguments that never change, RESP-encoded once."""

    __slots__ = ("admit_head", "keys", "log", "plan", "resv", "settle_head", "slot", "vector")

    def __init__(self, plan: Plan, admit_sha: str, settle_sha: str) -> None:
        self.plan = plan
        self.slot = key_slot(plan.log.encode())  # every key of the plan: the team's hash tag
        self.keys = bulks(plan.keys)
        self.vector = bulks(plan.vector)
        self.resv = bulks(plan.resv)
        # Then the ticket's mark, as the last key of either script.
        n = 3 + len(plan.keys) + 3 + 5 + len(plan.vector)
        self.admit_head = (b"*%d\r\n" % n + bulks(("EVALSHA", admit_sha, len(plan.keys) + 3)) + self.keys
                           + self.resv)
        self.settle_head = bulks(("EVALSHA", settle_sha, len(plan.keys) + 6)) + self.keys
        self.log = bulk(plan.log)


@functools.lru_cache(maxsize=64)
def _settings(*values: int) -> bytes:
    """A script call's arguments that come from settings (the lease's time to live, the record
    cap, the clock's skew): encoded once per value, where each call encoded them anew."""
    return bulks(values)


@functools.cache
def _script(*files: str) -> tuple[str, str]:
    """A script's text, its files joined (the shared functions first, the script last), and its
    SHA1 for EVALSHA; read once per process, whatever the number of stores."""
    scripts = resources.files("switchyard.policies").joinpath("scripts")
    text = "".join(scripts.joinpath(f"{n}.lua").read_text() for n in files)
    return text, hashlib.sha1(text.encode()).hexdigest()


class RedisStore:
    def __init__(self, client: Redis | RedisCluster, *, timeout: float = 0.25, ns: str = "sy",
                 max_records: int = 100_000, admin_timeout: float = 5.0) -> None:
        self.client = client
        self.timeout = timeout
        self.admin_timeout = admin_timeout  # admin reads (usage, records): not the hot path's deadline
        self.ns = ns
        self.max_records = max_records
        self.skew_ms = 0  # added to Redis TIME in the scripts; tests move the clock with it
        self._admit = _script("calendar", "admit")
        self._settle = _script("calendar", "keep", "settle")
        self._renew = _script("calendar", "renew")
        self._record = _script("calendar", "keep", "record")
        self._reap = _script("calendar", "reap")
        self._loaded = False
        self._loading = asyncio.Lock()
        self._cluster = isinstance(client, RedisCluster)
        self._pack: dict[int, _Packed] = {}
        # The hot path's own connections, one per node; None: redis-py serves it (TLS).
        self._conns: dict[tuple[str, int], RespConnection] = {}
        self._connecting: dict[tuple[str, int], asyncio.Task[RespConnection]] = {}
        self._inflight: set[asyncio.Future[Any]] = set()
        self._moved: dict[int, tuple[str, int]] = {}  # slots seen to move (MOVED), over redis-py's map
        self._endpoint: tuple[str, int] | None = None
        self._conn_kw: dict[str, Any] = {}
        if self._cluster:
            self._endpoint = ("", 0)  # per slot, see _addr
            self._conn_kw = {"password": client.nodes_manager.connection_kwargs.get("password"),  # type: ignore[union-attr]  # a RedisCluster here (_cluster)
                             "username": client.nodes_manager.connection_kwargs.get("username")}  # type: ignore[union-attr]  # a RedisCluster here
            if client.nodes_manager.connection_kwargs.get("ssl"):  # type: ignore[union-attr]  # a RedisCluster here
                self._endpoint = None
        else:
            pool = client.connection_pool  # type: ignore[union-attr]  # a plain Redis here
            kw = pool.connection_kwargs
            if pool.connection_class is Connection:
                self._endpoint = (kw.get("host", "localhost"), int(kw.get("port", 6379)))
            elif pool.connection_class is UnixDomainSocketConnection:
                self._endpoint = (kw["path"], 0)
            self._conn_kw = kw
        self.pipelined = self._pipelined if self._endpoint is not None and not self._cluster else None

    @classmethod
    def from_url(cls, url: str, *, timeout: float = 0.25, ns: str = "sy",
                 admin_timeout: float = 5.0) -> RedisStore:
        # Each call's deadline is an asyncio.timeout (the hot path's, or the admin reads' longer
        # one); connecting has the longer of them, so a large admin read is not cut. A pooled
        # connection found dead (Redis restarted) is reconnected and the command sent once more:
        # every command sent through redis-py is idempotent (reads, SET, SADD, the scripts by
        # their ticket mark); a timeout is not retried (it is the deadline).
        # No socket_timeout (redis-py 8 defaults to 5 s): it bounds each write with asyncio.wait_for,
        # which on Python 3.11 swallows a cancellation landing as the write completes (a stopping
        # background loop then never stops); the asyncio.timeout around each call is the deadline.
        longest = max(timeout, admin_timeout)
        opts: dict[str, Any] = dict(socket_timeout=None, socket_connect_timeout=longest,
                                    retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)))
        if url.startswith("redis+cluster://"):
            u = urlsplit(url)
            nodes = [ClusterNode(h, int(p)) for h, _, p in (n.rpartition(":") for n in u.netloc.split(","))]
            client: Redis | RedisCluster = RedisCluster(startup_nodes=nodes, password=u.password, **opts)
        else:
            client = Redis.from_url(url, **opts)
        return cls(client, timeout=timeout, ns=ns, admin_timeout=admin_timeout)

    async def _call(self, *args: Any, slow: bool = False) -> Any:
        """One redis-py command; ``slow``: an admin read, under ``admin_timeout``."""
        limit = self.admin_timeout if slow else self.timeout
        try:
            async with asyncio.timeout(limit):
                return await self.client.execute_command(*args)
        except TimeoutError as e:
            if slow:
                raise StoreSlow(f"the store did not answer this read within {limit:g} s") from e
            raise _down(e, self.timeout) from e
        except _ERRORS as e:
            raise _down(e, self.timeout) from e

    async def prepare(self) -> None:
        """Load the scripts at start, under the admin deadline: the first requests then need no
        SCRIPT LOAD inside their own 0.25 s. A store that is down now is tried again on use."""
        with contextlib.suppress(*_ERRORS):
            async with asyncio.timeout(self.admin_timeout):
                await self._load_scripts()

    async def _load_scripts(self) -> None:
        # SCRIPT LOAD up front (on every primary of a cluster): a burst of concurrent NOSCRIPT
        # replies makes redis-py's async cluster client drop connections.
        async with self._loading:
            if not self._loaded:
                for text, _ in (self._admit, self._settle, self._renew, self._record, self._reap):
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
            raise _down(e, self.timeout) from e

    def _packed(self, plan: Plan) -> _Packed:
        p = self._pack.get(id(plan))
        if p is None or p.plan is not plan:
            if len(self._pack) > 50_000:
                self._pack.clear()
            p = self._pack[id(plan)] = _Packed(plan, self._admit[1], self._settle[1])
        return p

    # -- the hot path: admit and settle over RespConnection (switchyard/policies/resp.py) ---------------

    def _addr(self, pk: _Packed | None) -> tuple[str, int] | None:
        """The node that serves the plan's slot (the one node of a plain Redis; no plan: a
        command of ``pipelined``, which only a plain Redis has)."""
        if not self._cluster or pk is None:
            return self._endpoint
        moved = self._moved.get(pk.slot)
        if moved is not None:
            return moved
        nodes = self.client.nodes_manager.slots_cache.get(pk.slot)  # type: ignore[union-attr]  # a RedisCluster here
        return (str(nodes[0].host), int(nodes[0].port)) if nodes else None

    def _write_now(self, pk: _Packed | None, packed: bytes,
                   defer: bool = False) -> asyncio.Future[Any] | None:
        """Send now (``defer``: queue for the loop's next turn, still ahead of any later command)
        if the scripts are loaded and the node's connection is up; else None."""
        if not self._loaded:
            return None
        # The node is known once the scripts are loaded.
        c = self._conns.get(self._addr(pk))  # type: ignore[arg-type]
        if c is None or c.lost:
            return None
        try:
            return c.request(packed, defer=defer)
        except ConnectionError:
            return None

    async def _write(self, pk: _Packed | None, packed: bytes) -> asyncio.Future[Any]:
        if not self._loaded:
            await self._load_scripts()
        addr = self._addr(pk)
        if addr is None:
            raise ConnectionError(f"no cluster node known for slot {pk.slot if pk is not None else '?'}")
        c = self._conns.get(addr)
        if c is None or c.lost:
            c = await self._connect(addr)
        return c.request(packed)

    async def _connect(self, addr: tuple[str, int]) -> RespConnection:
        task = self._connecting.get(addr)
        if task is None:
            task = self._connecting[addr] = asyncio.ensure_future(self._open(addr))
            task.add_done_callback(lambda t: (self._connecting.pop(addr, None),
                                              t.cancelled() or t.exception()))
        return await asyncio.shield(task)  # a caller's timeout must not cancel the shared connect

    async def _open(self, addr: tuple[str, int]) -> RespConnection:
        async with asyncio.timeout(self.timeout):
            kw = self._conn_kw
            c = await RespConnection.open(addr[0], addr[1], path=kw.get("path"), username=kw.get("username"),
                                          password=kw.get("password"), db=kw.get("db") or 0,
                                          timeout=self.timeout)
        old = self._conns.get(addr)
        if old is not None:
            old.close()
        self._conns[addr] = c
        return c

    async def _pipelined(self, packed: bytes) -> Any:
        """``pipelined`` on a plain Redis: the connection keeps the deadline itself (one timer
        per connection, not one per call)."""
        fut = self._write_now(None, packed, defer=True)
        if fut is None:  # not connected yet (or the scripts not loaded): as the hot path connects
            async with asyncio.timeout(self.timeout):
                fut = await self._write(None, packed)
        return await fut

    async def _fast(self, pk: _Packed, packed: bytes, script: tuple[str, str], keys: Any,
                    args: Callable[[], list[Any]], fut: asyncio.Future[Any] | None = None) -> Any:
        """One script call on the pipelined connection; redis-py when that cannot serve it. A
        command already on the wire (``fut``) is bounded by its connection's watchdog, which was
        armed as it went out; anything more (connecting, a retry, loading the scripts) by what is
        left of the same deadline."""
        if self._endpoint is None:
            return await self._run(script, keys, args())
        # (a command on the wire knows its loop: asking asyncio costs a getpid() system call)
        deadline = (fut.get_loop() if fut is not None else asyncio.get_running_loop()).time() + self.timeout
        try:
            try:
                for again in (False, True):
                    try:
                        if fut is not None:
                            return await fut
                        async with asyncio.timeout_at(deadline):
                            return await (await self._write(pk, packed))
                    except ConnectionError:
                        # The connection died under this call (Redis restarted, or a command
                        # ahead of it timed out): once more on a fresh one. Safe for every script
                        # here, even if the first copy ran and only its reply was lost: each is
                        # idempotent per ticket (the mark, see admit.lua and settle.lua; renew just
                        # sets expiries).
                        if again:
                            raise
                        fut = None
            except ReplyError as e:
                async with asyncio.timeout_at(deadline):
                    if e.code == "NOSCRIPT":  # a restarted or new node: load again, once
                        self._loaded = False
                        await self._load_scripts()
                        return await (await self._write(pk, packed))
                    if e.code == "MOVED" and self._cluster:  # "MOVED <slot> <host>:<port>": go there
                        host, _, port = str(e).split(" ")[2].rpartition(":")
                        self._moved[pk.slot] = (host, int(port))
                        return await (await self._write(pk, packed))
                if e.code not in _REDIRECTS:
                    raise
        except TimeoutError as e:
            # A node that does not answer in time is treated as gone: drop its connection so
            # that calls queued behind it fail now, and the next call reconnects.
            c = self._conns.get(self._addr(pk))  # type: ignore[arg-type]  # known once the scripts are loaded
            if c is not None:
                c.close()
            raise _down(e, self.timeout) from e
        except _ERRORS as e:
            raise _down(e, self.timeout) from e
        return await self._run(script, keys, args())  # the slot moved: redis-py follows it

    async def admit(self, plan: Plan, *, tokens: int, spend: int, lease_id: str | None,
                    lease_ttl_ms: int, ticket: str) -> Admission:
        pk = self._packed(plan)
        mark = plan.mark_prefix + ticket
        skew = self.skew_ms
        packed = b"".join((pk.admit_head, bulk(mark), bulk(tokens), bulk(spend), bulk(lease_id or ""),
                           _settings(lease_ttl_ms, skew), pk.vector))
        r = await self._fast(pk, packed, self._admit, (*plan.keys, *plan.resv, mark),
                             lambda: [tokens, spend, lease_id or "", lease_ttl_ms, skew, *plan.vector],
                             self._write_now(pk, packed))
        if r[0] == 1:
            return Admission(True, r[1], req=(r[2], r[3], r[4]) if r[2] >= 0 else None,
                             tok=(r[5], r[6], r[7]) if r[5] >= 0 else None)
        return Admission(False, r[1], scope=r[2] - 1, kind=_KINDS[r[3]], retry_ms=r[4], limit=r[5],
                         remaining=r[6] if len(r) > 6 else -1)

    def settle_nowait(self, plan: Plan, *, admitted_ms: int, token_delta: int, spend_delta: int,
                      lease_id: str | None, record: UsageRecord, rates: bool = True,
                      refund_request: bool = False) -> tuple[bool, Awaitable[None] | None]:
        """``settle`` in two halves: (sent, result). ``sent``: the command is already on the wire
        (the connection was up), so this replica's later admissions queue behind it on the same
        connection, and this store's own reads wait for it. Await ``result`` for the outcome
        (``StoreDown``); when not ``sent`` it does the whole call."""
        mode = (b"2" if refund_request else b"1") if rates else b"0"
        return self._settle_call(plan, record.ticket_id, mode, token_delta, spend_delta, lease_id,
                                 admitted_ms, record.ts_ms, *_packed_record(record))

    async def cancel(self, plan: Plan, *, ticket: str, tokens: int, spend: int, lease_id: str | None) -> None:
        _, result = self._settle_call(plan, ticket, b"c", -tokens, -spend, lease_id, 0, 0, _NONE, _NONE)
        if result is not None:
            await result

    def _settle_call(self, plan: Plan, ticket: str, mode: bytes, token_delta: int, spend_delta: int,
                     lease_id: str | None, admitted_ms: int, ts_ms: int, aggs: bytes,
                     rec: bytes) -> tuple[bool, Awaitable[None] | None]:
        """``aggs`` and ``rec``: msgpack arrays (``agg_increments``, ``UsageRecord.set_fields``)."""
        keys = [*plan.keys, plan.agg_key(ts_ms // DAY_MS), f"{plan.agg_prefix}m:{ts_ms // HOUR_MS}",
                plan.log, *plan.resv, plan.mark_prefix + ticket]
        pk = self._packed(plan)
        packed = b"".join((b"*%d\r\n" % (3 + len(keys) + 9 + len(plan.vector)),
                           pk.settle_head, bulk(keys[-6]), bulk(keys[-5]), pk.log, pk.resv, bulk(keys[-1]),
                           bulk(token_delta), bulk(spend_delta), bulk(lease_id or ""), bulk(admitted_ms),
                           bulk(mode), _settings(self.max_records, self.skew_ms), pk.vector,
                           bulk(aggs), bulk(rec)))

        def args() -> list[Any]:  # for redis-py, when the slot moved
            return [token_delta, spend_delta, lease_id or "", admitted_ms, mode, self.max_records,
                    self.skew_ms, *plan.vector, aggs, rec]

        fut = self._write_now(pk, packed, defer=True)
        if fut is not None:
            self._inflight.add(fut)
            fut.add_done_callback(self._inflight.discard)
        return fut is not None, self._fast(pk, packed, self._settle, keys, args, fut)

    def refuse_nowait(self, team: str, record: UsageRecord) -> Awaitable[None] | None:
        """One EVALSHA of record.lua, on the hot path's connection when it is up (as settle)."""
        t = f"{self.ns}:{tag(team)}"
        keys = (f"{t}:agg:{record.ts_ms // DAY_MS}", f"{t}:aggm:{record.ts_ms // HOUR_MS}", f"{t}:log")
        args: list[Any] = [self.max_records, record.ts_ms // MINUTE_MS, *_packed_record(record)]
        if self._endpoint is None or self._cluster:  # TLS, or a cluster's slot map: redis-py
            return self._run(self._record, keys, args)
        packed = encode(("EVALSHA", self._record[1], 3, *keys, *args))
        fut = self._write_now(None, packed, defer=True)
        if fut is None:
            return self._run(self._record, keys, args)
        self._inflight.add(fut)
        fut.add_done_callback(self._inflight.discard)
        return self._reply(fut, keys, args)

    async def _reply(self, fut: asyncio.Future[Any], keys: tuple[str, ...], args: list[Any]) -> None:
        try:
            async with asyncio.timeout(self.timeout):
                await fut
        except ReplyError as e:
            if e.code != "NOSCRIPT":
                raise StoreDown(f"ReplyError: {e}") from e
            self._loaded = False  # a restarted node: load again, once
            await self._run(self._record, keys, args)
        except _ERRORS as e:
            raise StoreDown(f"{type(e).__name__}: {e}") from e

    def _unauth_keys(self) -> tuple[str, str]:
        return f"{self.ns}:{{unauth}}:d", f"{self.ns}:{{unauth}}:m"

    async def count_unauthenticated(self, reason: str, now_ms: int) -> None:
        d, m = self._unauth_keys()
        day, minute = now_ms // DAY_MS, now_ms // MINUTE_MS
        try:
            async with asyncio.timeout(self.timeout):
                pipe = self.client.pipeline(transaction=False)
                pipe.hincrby(f"{d}:{day}", reason, 1)
                pipe.pexpire(f"{d}:{day}", 400 * DAY_MS)
                pipe.hincrby(f"{m}:{minute * MINUTE_MS // HOUR_MS}", f"{minute}\x1f{reason}", 1)
                pipe.pexpire(f"{m}:{minute * MINUTE_MS // HOUR_MS}", 2 * HOUR_MS + MINUTE_MS)
                await pipe.execute()
        except _ERRORS as e:
            raise StoreDown(f"{type(e).__name__}: {e}") from e

    async def unauthenticated(self, days: list[int], hours: list[int]) -> dict[str, int]:
        d, m = self._unauth_keys()
        out: dict[str, int] = {}
        for day in days:
            for k, v in (await self._call("HGETALL", f"{d}:{day}")).items():
                out[f"d{day}\x1f{k.decode()}"] = int(v)
        for hour in hours:
            for k, v in (await self._call("HGETALL", f"{m}:{hour}")).items():
                out[f"m{k.decode()}"] = int(v)
        return out

    async def minutes(self, team: str, hours: list[int]) -> dict[str, int]:
        await self._settled()
        out: dict[str, int] = {}
        for hour in hours:
            raw = await self._call("HGETALL", f"{self.ns}:{tag(team)}:aggm:{hour}")
            out.update({k.decode(): int(v) for k, v in raw.items()})
        return out

    async def settle(self, plan: Plan, *, admitted_ms: int, token_delta: int, spend_delta: int,
                     lease_id: str | None, record: UsageRecord, rates: bool = True,
                     refund_request: bool = False) -> None:
        _, result = self.settle_nowait(plan, admitted_ms=admitted_ms, token_delta=token_delta,
                                       spend_delta=spend_delta, lease_id=lease_id, record=record,
                                       rates=rates, refund_request=refund_request)
        if result is not None:
            await result

    async def _settled(self) -> None:
        """Read-your-writes for this replica: wait for settlements already sent."""
        if self._inflight:
            await asyncio.wait(list(self._inflight), timeout=self.timeout)

    async def renew(self, leases: list[tuple[Plan, str]], ttl_ms: int,
                    held: Sequence[tuple[Plan, str]] = ()) -> None:
        by_team: dict[str, tuple[list[str], list[Any]]] = defaultdict(lambda: ([], [ttl_ms + self.skew_ms]))
        for plan, lid in leases:
            keys, args = by_team[plan.team]
            for s in plan.scopes:
                if s.vector[2] >= 0:
                    keys.append(s.keys[1])
                    args.append(lid)
        for plan, ticket in held:
            keys, args = by_team[plan.team]
            keys.append(plan.resv[0])
            args.append(plan.mark_prefix + ticket)
        for keys, args in by_team.values():
            await self._run(self._renew, keys, args)

    async def reap(self, team: str, limit: int = 1000) -> int:
        """Give back the quota reservations of ``team``'s admissions whose replica stopped
        renewing them (reap.lua); how many."""
        return int(await self._run(self._reap, list(resv_keys(self.ns, team)), [self.skew_ms, limit]))

    async def get_docs(self, names: list[str]) -> list[dict[str, Any] | None]:
        try:
            async with asyncio.timeout(self.timeout):
                if isinstance(self.client, RedisCluster):
                    raw = await self.client.mget_nonatomic(names)
                else:
                    raw = await self.client.mget(names)
        except _ERRORS as e:
            raise _down(e, self.timeout) from e
        return [json.loads(v) if v is not None else None for v in raw]

    async def put_doc(self, name: str, doc: dict[str, Any], ttl_ms: int | None = None) -> None:
        if ttl_ms is None:
            await self._call("SET", name, json.dumps(doc))
        else:
            await self._call("SET", name, json.dumps(doc), "PX", ttl_ms)

    async def claim(self, name: str, ttl_ms: int) -> bool:
        return bool(await self._call("SET", name, b"1", "NX", "PX", ttl_ms))

    async def add_member(self, set_name: str, member: str) -> None:
        await self._call("SADD", set_name, member)

    async def members(self, set_name: str) -> set[str]:
        return {m.decode() for m in await self._call("SMEMBERS", set_name, slow=True)}

    async def audit_append(self, entry: dict[str, Any]) -> str:
        # A stream: Redis gives each entry an id after every earlier one; no command edits one.
        sid = await self._call("XADD", f"{self.ns}:audit", "MAXLEN", "~", AUDIT_KEPT, "*",
                               "e", json.dumps(entry))
        ms, _, seq = (sid.decode() if isinstance(sid, bytes) else sid).partition("-")
        return audit_id(int(ms), int(seq))

    async def audit_read(self, before: str | None, limit: int) -> list[dict[str, Any]]:
        top = "+"
        if before is not None:
            ms, _, seq = before.partition("-")
            if not (ms.isdigit() and seq.isdigit()):
                return []
            top = f"({int(ms)}-{int(seq)}"
        raw = await self._call("XREVRANGE", f"{self.ns}:audit", top, "-", "COUNT", limit, slow=True)
        out = []
        for sid, fields in raw:
            ms, _, seq = sid.decode().partition("-")
            out.append(json.loads(fields[b"e"]) | {"id": audit_id(int(ms), int(seq))})
        return out

    async def aggregates(self, team: str, days: list[int],
                         dimensions: bool = False) -> dict[int, dict[str, int]]:
        await self._settled()
        prefix = f"{self.ns}:{tag(team)}:agg"
        tail = ":x" if dimensions else ""  # settle.lua: tags', end users' and sessions' sums
        out: dict[int, dict[str, int]] = {}
        for day in days:  # one slot per team; a loop of HGETALLs is fine for an admin query
            raw = await self._call("HGETALL", f"{prefix}:{day}{tail}", slow=True)
            if raw:
                out[day] = {k.decode(): int(v) for k, v in raw.items()}
        return out

    async def records(self, team: str, limit: int) -> list[UsageRecord]:
        await self._settled()
        log = f"{self.ns}:{tag(team)}:log"
        raw = await self._call("XREVRANGE", log, "+", "-", "COUNT", limit, slow=True)
        return [UsageRecord.from_fields({k.decode(): v for k, v in fields.items()}) for _, fields in raw]

    async def ping(self) -> None:
        await self._call("PING")

    async def aclose(self) -> None:
        await self._settled()
        for c in self._conns.values():
            c.close()
        self._conns.clear()
        with contextlib.suppress(RedisError, OSError):
            await self.client.aclose()


def _down(e: BaseException, timeout: float) -> StoreDown:
    """The store failure as ``Type: text``; a timeout says nothing itself, so its bound is named."""
    text = str(e) or (f"no answer within store.timeout {timeout:g} s" if isinstance(e, TimeoutError)
                      else "no detail given")
    return StoreDown(f"{type(e).__name__}: {text}")
