"""sqlite:// -- one process, with the admin state kept in a file across restarts.

The counters (rpm, tpm, concurrency, quotas, usage aggregates and records) are ``MemoryStore``'s,
in the process: they are rebuilt within a minute (rates) or a day (quotas) and a restart losing
them is what an operator expects. What the admin API changes is not: keys, teams, limits,
revocations, console sessions, admin tokens, anything stored as a document or a set member,
and the audit trail. Those are rows in an SQLite file (``sqlite:///path/state.db``; bare
``sqlite://`` is ``default_path()``).

Every SQLite call runs on one thread of this store's own, so nothing blocks the event loop and
the connection is only ever used by the thread that opened it. The file is in WAL mode and every
read goes to the file, so a second process on the same file (an old app still draining after a
reload, ``switchyard serve`` started twice) reads what the other wrote. ``serve --workers N``
still refuses it: the counters would be per worker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from switchyard.core.settings import switchyard_home
from switchyard.policies.memory import MemoryStore, wall_ms
from switchyard.policies.store import AUDIT_KEPT, StoreDown, audit_id

T = TypeVar("T")
log = logging.getLogger("switchyard.store")
SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (name TEXT PRIMARY KEY, body TEXT NOT NULL, expires_ms INTEGER);
CREATE INDEX IF NOT EXISTS docs_expiry ON docs (expires_ms) WHERE expires_ms IS NOT NULL;
CREATE TABLE IF NOT EXISTS members (set_name TEXT NOT NULL, member TEXT NOT NULL,
                                    PRIMARY KEY (set_name, member)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS audit (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL);
"""
_SWEEP_EVERY = 256  # TTL'd puts between deletions of expired documents nobody reads again


_OWN_ID = re.compile(r"(\d{15})-000000")  # audit_id(row id, 0)


def default_path() -> Path:
    """Where bare ``sqlite://`` keeps its file: ``switchyard_home()/state.db``."""
    return switchyard_home() / "state.db"


def path_of(url: str) -> Path:
    """``sqlite:///abs/state.db`` -> /abs/state.db; ``sqlite://rel.db`` -> rel.db; ``sqlite://``
    -> ``default_path()``."""
    rest = url.removeprefix("sqlite://")
    return Path(os.path.expanduser(rest)) if rest else default_path()


class SqliteStore(MemoryStore):
    def __init__(self, path: str | Path, ns: str = "sy", clock: Callable[[], int] = wall_ms,
                 timeout: float = 5.0) -> None:
        super().__init__(ns=ns, clock=clock)
        self.path = Path(path)
        self.admin_timeout = timeout  # a file write (fsync) on a busy disk, not a network hop
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="switchyard-sqlite")
        self._db: sqlite3.Connection | None = None  # opened and used on the pool's thread only
        self._ttl_puts = 0

    # -- the thread's side ---------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=self.admin_timeout, isolation_level=None)
            try:
                os.chmod(self.path, 0o600)  # key digests, team limits, session ids' hashes
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=FULL")  # a revocation answered is a revocation kept
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise sqlite3.DatabaseError(f"{self.path} was written by a newer switchyard "
                                                f"(schema {version}, this one knows {SCHEMA_VERSION})")
                db.executescript(_SCHEMA)
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    def _get(self, names: list[str], now: int) -> list[dict[str, Any] | None]:
        marks = ",".join("?" * len(names))
        rows = self._conn().execute(
            f"SELECT name, body FROM docs WHERE name IN ({marks}) AND (expires_ms IS NULL OR expires_ms > ?)",
            (*names, now)).fetchall()
        found = {n: json.loads(b) for n, b in rows}
        return [found.get(n) for n in names]

    def _put(self, name: str, body: str, expires_ms: int | None, sweep_before: int | None) -> None:
        db = self._conn()
        with db:
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO docs (name, body, expires_ms) VALUES (?, ?, ?) ON CONFLICT (name) "
                       "DO UPDATE SET body = excluded.body, expires_ms = excluded.expires_ms",
                       (name, body, expires_ms))
            if sweep_before is not None:
                db.execute("DELETE FROM docs WHERE expires_ms IS NOT NULL AND expires_ms <= ?",
                           (sweep_before,))

    def _claim(self, name: str, now: int, expires_ms: int) -> bool:
        # One statement: of replicas or workers sharing the file, exactly one claims the name
        # while it is held (an expired claim may be taken again).
        cur = self._conn().execute(
            "INSERT INTO docs (name, body, expires_ms) VALUES (?, '{}', ?) ON CONFLICT (name) "
            "DO UPDATE SET body = '{}', expires_ms = excluded.expires_ms "
            "WHERE docs.expires_ms IS NOT NULL AND docs.expires_ms <= ?", (name, expires_ms, now))
        return cur.rowcount == 1

    def _add(self, set_name: str, member: str) -> None:
        self._conn().execute("INSERT OR IGNORE INTO members (set_name, member) VALUES (?, ?)",
                             (set_name, member))

    def _members(self, set_name: str) -> set[str]:
        rows = self._conn().execute("SELECT member FROM members WHERE set_name = ?", (set_name,))
        return {m for (m,) in rows}

    def _audit_append(self, body: str) -> int:
        db = self._conn()
        cur = db.execute("INSERT INTO audit (body) VALUES (?)", (body,))
        assert cur.lastrowid is not None
        # At most AUDIT_KEPT entries, as in the other stores: the oldest go.
        db.execute("DELETE FROM audit WHERE id <= ?", (cur.lastrowid - AUDIT_KEPT,))
        return cur.lastrowid

    def _audit_read(self, before: int | None, limit: int) -> list[tuple[int, str]]:
        q = "SELECT id, body FROM audit" + (" WHERE id < ?" if before is not None else "")
        args: tuple[int, ...] = (before, limit) if before is not None else (limit,)
        return self._conn().execute(q + " ORDER BY id DESC LIMIT ?", args).fetchall()

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- the event loop's side -----------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the store's thread; a failing or stuck file is ``StoreDown``."""
        try:
            async with asyncio.timeout(self.admin_timeout):
                return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        except TimeoutError as e:
            raise StoreDown(f"the state file {self.path} did not answer within "
                            f"{self.admin_timeout:g} s") from e
        except (sqlite3.Error, OSError) as e:
            raise StoreDown(f"the state file {self.path}: {type(e).__name__}: {e}") from e

    async def prepare(self) -> None:
        """Open (and create) the file at start, so a path that cannot be used is said at once."""
        try:
            await self._run(self._conn)
        except StoreDown as e:
            log.error("%s", e)

    async def get_docs(self, names: list[str]) -> list[dict[str, Any] | None]:
        if not names:
            return []
        return await self._run(self._get, list(names), self._now())

    async def put_doc(self, name: str, doc: dict[str, Any], ttl_ms: int | None = None) -> None:
        now = self._now()
        sweep = None
        if ttl_ms is not None:
            self._ttl_puts += 1
            if self._ttl_puts % _SWEEP_EVERY == 0:
                sweep = now
        await self._run(self._put, name, json.dumps(doc), None if ttl_ms is None else now + ttl_ms, sweep)

    async def claim(self, name: str, ttl_ms: int) -> bool:
        now = self._now()
        return await self._run(self._claim, name, now, now + ttl_ms)

    async def add_member(self, set_name: str, member: str) -> None:
        await self._run(self._add, set_name, member)

    async def members(self, set_name: str) -> set[str]:
        return await self._run(self._members, set_name)

    async def audit_append(self, entry: dict[str, Any]) -> str:
        """Append ``entry``; its id (sortable as a string, newest last): the row id in the
        stores' one id shape (``audit_id``), which the audit API takes back as a cursor."""
        return audit_id(await self._run(self._audit_append, json.dumps(entry)), 0)

    async def audit_read(self, before: str | None, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` entries older than id ``before`` (all when None), newest first; each
        with its ``id``. A ``before`` this store did not give is a ValueError."""
        row = None
        if before:
            m = _OWN_ID.fullmatch(before)
            if m is None:
                raise ValueError(f"{before[:40]!r} is not an audit entry id")
            row = int(m[1])
        rows = await self._run(self._audit_read, row, limit)
        return [json.loads(body) | {"id": audit_id(i, 0)} for i, body in rows]

    async def ping(self) -> None:
        await self._run(self._conn)

    async def aclose(self) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, self._close)
        finally:
            self._pool.shutdown(wait=False)
