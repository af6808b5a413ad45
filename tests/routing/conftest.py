"""Router tests: real gateways (``tests.gateway.conftest.serve``) in front of loopback upstreams that
fail on purpose (``tests.fakes.upstream``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest

from switchyard.core.config import Config
from switchyard.policies.store import UsageRecord
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import base_config

# Fast retries so tests do not wait; the rules are the same.
FAST = {"retries": 2, "backoff_base": 0.001, "backoff_max": 0.01, "cooldown_failures": 3,
        "cooldown_seconds": 30}


def dep(name: str, url: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "backend": "upstream", "dialect": kw.pop("dialect", "openai"), "base_url": url,
            **kw}


def group(name: str, *deps: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"name": name, "deployments": list(deps), **kw}


def config(*models: dict[str, Any], router: dict[str, Any] | None = None, **extra: Any) -> Config:
    return base_config(list(models), router={**FAST, **(router or {})}, **extra)


async def records(client: httpx.AsyncClient) -> list[UsageRecord]:
    """Usage records the gateway settled (oldest first), once background settlements are done."""
    gw = client.app.state.gateway  # type: ignore[attr-defined]
    await gw.drain()
    return list(reversed(await gw.policies.store.records("t", 1000)))


def completion(model: str, **kw: Any) -> dict[str, Any]:
    return {"model": model, "prompt": "hi", "max_tokens": 3, **kw}


@pytest.fixture
async def upstreams() -> AsyncIterator[list[FakeUpstream]]:
    """Three independent loopback upstreams."""
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(FakeUpstream()) for _ in range(3)]
