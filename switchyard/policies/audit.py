"""The audit trail: one entry per admin change, append-only.

An entry: ``at``, ``actor`` (``master``, an admin token's id, or a user's subject) with ``email``
and ``role``, ``action``, ``target``, ``before`` and ``after`` (what the admin API shows of the
thing, never a secret), ``client`` (address), ``request_id``, and ``teams`` (whom the change
concerns: a reader limited to teams sees an entry only when every one of them is theirs; none,
such as a breaker reset or a sign-in with the master key, only a reader of every team).

Entries go to the store (``Store.audit_append``), and also to the ledger's ``audit_log`` table
when a ledger is configured; reads come from the ledger then (``audit_log`` refuses UPDATE and
DELETE by trigger), else from the store. Entries older than ``audit.retention_days`` are not
shown, and the ledger deletes them (at most hourly).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from switchyard.core.errors import InvalidRequest
from switchyard.policies.store import Store
from switchyard.policies.usage_filter import parse_when

if TYPE_CHECKING:
    from switchyard.policies.ledger.sink import PgSink

log = logging.getLogger("switchyard.audit")

FIELDS = ("at", "actor", "role", "action", "target", "before", "after", "client", "request_id")
MAX_LIMIT = 1000
SCAN = 10_000  # store entries one read looks through for its filters before answering with a cursor
PURGE_EVERY_S = 3600.0
_STORE_CURSOR = re.compile(r"\d{15}-\d{6}")
_LEDGER_CURSOR = re.compile(r"p\d{1,19}")


def _iso(ms: int) -> str:
    t = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AuditLog:
    def __init__(self, store: Store, *, sink: PgSink | None = None, retention_days: int = 365) -> None:
        self.store = store
        self.sink = sink
        self.retention_ms = retention_days * 86_400_000
        self._purge_at = 0.0

    async def record(self, *, actor: Mapping[str, Any], action: str, target: str, before: Any = None,
                     after: Any = None, client: str | None = None, request_id: str | None = None,
                     teams: list[str] | None = None) -> None:
        """Append one entry. ``actor``: ``roles.Actor.as_dict()`` (id, role, email)."""
        now = int(time.time() * 1000)
        entry = {"at_ms": now, "actor": actor["id"], "email": actor.get("email"), "role": actor.get("role"),
                 "action": action, "target": target, "before": before, "after": after, "client": client,
                 "request_id": request_id, "teams": sorted(teams) if teams is not None else None}
        await self.store.audit_append(entry)
        if self.sink is not None:
            try:
                await self._to_ledger(entry)
            except Exception as e:  # the store has it; the ledger's copy is the durable one
                log.error("audit: the ledger did not take %s on %s: %s", action, target, type(e).__name__)

    async def _to_ledger(self, e: dict[str, Any]) -> None:
        assert self.sink is not None
        async with self.sink.reading() as conn:
            await conn.execute(
                "INSERT INTO audit_log (at, actor, email, role, action, target, before, after, client, "
                "request_id, teams) VALUES ('epoch'::timestamptz + $1 * interval '1 millisecond', $2, $3, "
                "$4, $5, $6, $7::jsonb, $8::jsonb, $9, $10, $11)",
                e["at_ms"], e["actor"], e["email"], e["role"], e["action"], e["target"],
                json.dumps(e["before"]), json.dumps(e["after"]), e["client"], e["request_id"], e["teams"])
            if time.monotonic() >= self._purge_at:
                self._purge_at = time.monotonic() + PURGE_EVERY_S
                async with conn.transaction():
                    await conn.execute("SET LOCAL switchyard.audit_purge = 'on'")
                    await conn.execute("DELETE FROM audit_log WHERE at < now() - $1 * interval "
                                       "'1 millisecond'", self.retention_ms)

    async def read(self, q: Mapping[str, str], teams: frozenset[str] | None) -> dict[str, Any]:
        """``GET /admin/audit``: filters ``actor``, ``action``, ``target``, ``from``, ``to``;
        ``cursor`` and ``limit`` page; newest first. ``teams``: the reader's (None: all)."""
        try:
            limit = min(max(int(q.get("limit") or 100), 1), MAX_LIMIT)
        except ValueError:
            raise InvalidRequest("limit must be an integer", param="limit") from None
        lo = int(parse_when(q["from"], "from")[0].timestamp() * 1000) if q.get("from") else None
        hi = None
        if q.get("to"):
            end, instant = parse_when(q["to"], "to")
            hi = int((end if instant else end + dt.timedelta(days=1)).timestamp() * 1000)  # a day: inclusive
        lo = max(lo or 0, int(time.time() * 1000) - self.retention_ms)
        match = {k: q[k] for k in ("actor", "action", "target") if q.get(k)}
        cursor = q.get("cursor") or None
        pattern = _LEDGER_CURSOR if self.sink is not None else _STORE_CURSOR
        if cursor is not None and not pattern.fullmatch(cursor):
            raise InvalidRequest("cursor is not one this API gave (next_cursor)", param="cursor")
        if self.sink is not None:
            return await self._read_ledger(match, lo, hi, cursor, limit, teams)
        return await self._read_store(match, lo, hi, cursor, limit, teams)

    async def _read_store(self, match: dict[str, str], lo: int, hi: int | None, cursor: str | None,
                          limit: int, teams: frozenset[str] | None) -> dict[str, Any]:
        out: list[dict[str, Any]] = []
        scanned, last = 0, cursor
        while len(out) < limit and scanned < SCAN:
            page = await self.store.audit_read(last, min(500, SCAN - scanned))
            if not page:
                return {"data": out, "next_cursor": None}
            for e in page:
                scanned += 1
                last = e["id"]
                if e["at_ms"] < lo:
                    return {"data": out, "next_cursor": None}  # newest first: the rest are older
                if (hi is None or e["at_ms"] < hi) and _visible(e, match, teams):
                    out.append(_public(e))
                    if len(out) >= limit:
                        break
        return {"data": out, "next_cursor": last}

    async def _read_ledger(self, match: dict[str, str], lo: int, hi: int | None, cursor: str | None,
                           limit: int, teams: frozenset[str] | None) -> dict[str, Any]:
        assert self.sink is not None
        args: list[Any] = [lo]
        conds = ["at >= 'epoch'::timestamptz + $1 * interval '1 millisecond'"]

        def arg(v: Any) -> str:
            args.append(v)
            return f"${len(args)}"

        if hi is not None:
            conds.append(f"at < 'epoch'::timestamptz + {arg(hi)} * interval '1 millisecond'")
        for col, v in match.items():
            conds.append(f"{col} = {arg(v)}")
        if cursor is not None:
            conds.append(f"id < {arg(int(cursor[1:]))}")
        if teams is not None:
            conds.append(f"cardinality(teams) > 0 AND teams <@ {arg(sorted(teams))}::text[]")
        sql = (f"SELECT id, (extract(epoch FROM at) * 1000)::bigint AS at_ms, actor, email, role, action, "
               f"target, before::text, after::text, client, request_id, teams FROM audit_log "
               f"WHERE {' AND '.join(conds)} ORDER BY id DESC LIMIT {limit}")
        async with self.sink.reading() as conn:
            rows = await conn.fetch(sql, *args)
        data = [_public(dict(r) | {"before": json.loads(r["before"] or "null"),
                                   "after": json.loads(r["after"] or "null")}) for r in rows]
        return {"data": data, "next_cursor": f"p{rows[-1]['id']}" if len(rows) == limit else None}


def _visible(e: dict[str, Any], match: dict[str, str], teams: frozenset[str] | None) -> bool:
    if any(e.get(k) != v for k, v in match.items()):
        return False
    return teams is None or (bool(e.get("teams")) and set(e["teams"]) <= teams)


def _public(e: dict[str, Any]) -> dict[str, Any]:
    return {"at": _iso(e["at_ms"]), "actor": e["actor"], "email": e.get("email"), "role": e.get("role"),
            "action": e["action"], "target": e["target"], "before": e.get("before"), "after": e.get("after"),
            "client": e.get("client"), "request_id": e.get("request_id"), "teams": e.get("teams")}
