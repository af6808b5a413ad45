"""Console fixtures: a gateway on loopback in front of a fake upstream, and a signed-in session."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from switchyard.core.config import Config, parse_config
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import serve
from tests.policies.ledger.conftest import database_url, pg_server_url  # noqa: F401 -- the ledger's fixtures

MASTER = "sk-master-console"
KEY = "sk-console-alice"
MASTER_AUTH = {"authorization": f"Bearer {MASTER}"}


def console_config(upstream_url: str, store: str = "memory://", ledger: str | None = None,
                   **extra: Any) -> Config:
    raw: dict[str, Any] = {
        "master_key": MASTER,
        "store": {"url": store, "timeout": 2.0},
        "router": {"retries": 0, "cooldown_failures": 2, "cooldown_seconds": 30},
        "models": [{"name": "openai/gpt-4o", "aliases": ["gpt-4o"],
                    "price": {"prompt_per_1m": 2.5, "completion_per_1m": 10.0},
                    "deployments": [{"name": "d1", "base_url": upstream_url, "model": "gpt-4o"}]}],
        "teams": [{"name": "ml", "limits": {"spend_per_day": 1.0}}, {"name": "ops"}],
        "keys": [{"id": "alice", "team": "ml", "key": KEY}],
    }
    if ledger:
        raw["usage"] = {"ledger": ledger, "interval": 0.05}
    raw.update(extra)
    return parse_config(raw)


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as up:
        yield up


@asynccontextmanager
async def gateway(config: Config) -> AsyncIterator[httpx.AsyncClient]:
    """A gateway on loopback; the client carries no credentials of its own."""
    async with serve(config) as c:
        c.headers.pop("authorization")
        yield c


async def sign_in(c: httpx.AsyncClient) -> str:
    """Signs ``c`` in (its cookie jar keeps the session); returns the page's CSRF token."""
    r = await c.post("/ui/login", data={"master_key": MASTER})
    assert r.status_code == 303 and r.headers["location"] == "/ui"
    page = await c.get("/ui")
    m = re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text)
    assert m, page.text[:300]
    return m.group(1)


async def complete(c: httpx.AsyncClient, key: str) -> httpx.Response:
    return await c.post("/v1/chat/completions", headers={"authorization": f"Bearer {key}"},
                        json={"model": "openai/gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                              "max_tokens": 5})
