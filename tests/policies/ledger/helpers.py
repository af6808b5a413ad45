"""Shared by the ledger tests: a gateway config with a ledger, and waiting for rows."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg

PROMPT_NANO = 2500  # nano-USD per prompt token ($2.5 per 1M)
COMPLETION_NANO = 10_000  # $10 per 1M
MASTER = "sk-master-0123456789"
KEYS = {"k1": "sk-ledger-one", "k2": "sk-ledger-two"}


def ledger_config(upstream: str, database_url: str, store: str = "memory://",
                  **usage: Any) -> dict[str, Any]:
    return {
        "master_key": MASTER,
        "store": {"url": store, "timeout": 2.0},
        "usage": {"ledger": database_url, "interval": 0.05, "batch": 50, **usage},
        "models": [{"name": "openai/gpt-4o", "aliases": ["gpt-4o"],
                    "price": {"prompt_per_1m": 2.5, "completion_per_1m": 10.0},
                    "deployments": [{"name": "d1", "base_url": upstream, "model": "gpt-4o"}]}],
        "teams": [{"name": "t"}, {"name": "u"}],
        "keys": [{"id": "k1", "team": "t", "key": KEYS["k1"]}, {"id": "k2", "team": "u", "key": KEYS["k2"]}],
    }


async def wait_rows(url: str, n: int, timeout: float = 30.0) -> list[asyncpg.Record]:
    """The ledger's rows once there are ``n`` (a deadline, not a measurement); fails with what is
    there when they do not arrive in time."""
    deadline = time.monotonic() + timeout
    rows: list[asyncpg.Record] = []
    while time.monotonic() < deadline:
        try:
            conn = await asyncpg.connect(url)
            try:
                if await conn.fetchval("SELECT to_regclass('usage_records') IS NOT NULL"):
                    rows = await conn.fetch("SELECT * FROM usage_records ORDER BY ts, ticket_id")
            finally:
                await conn.close()
        except (OSError, asyncpg.PostgresError):
            pass  # a server being restarted
        if len(rows) >= n:
            return rows
        await asyncio.sleep(0.1)
    raise AssertionError(f"the ledger has {len(rows)} rows after {timeout} s, not {n}")


def expected_cost(prompt: int, completion: int) -> int:
    return prompt * PROMPT_NANO + completion * COMPLETION_NANO
