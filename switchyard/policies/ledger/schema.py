"""The ledger's schema: plain SQL files (``migrations/NNN_name.sql``) applied in order at start.

``ledger_schema`` records the versions applied. Every replica runs ``migrate`` when it starts;
an advisory lock makes concurrent starts apply each file once.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

_LOCK = 0x5357_4C45  # pg_advisory_xact_lock key: "SWLE"
_FILE = re.compile(r"(\d+)_[a-z0-9_]+\.sql")


def migrations() -> list[tuple[int, str, str]]:
    """(version, file name, SQL), ordered by version."""
    folder = resources.files("switchyard.policies.ledger").joinpath("migrations")
    out = []
    for f in folder.iterdir():
        m = _FILE.fullmatch(f.name)
        if m:
            out.append((int(m.group(1)), f.name, f.read_text()))
    return sorted(out)


async def migrate(conn: Any) -> list[int]:
    """Apply the migrations this database lacks, in one transaction; the versions applied."""
    applied: list[int] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
        await conn.execute("CREATE TABLE IF NOT EXISTS ledger_schema (version integer PRIMARY KEY, "
                           "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        have = {r["version"] for r in await conn.fetch("SELECT version FROM ledger_schema")}
        for version, name, sql in migrations():
            if version in have:
                continue
            await conn.execute(sql)
            await conn.execute("INSERT INTO ledger_schema (version, name) VALUES ($1, $2)", version, name)
            applied.append(version)
    return applied
