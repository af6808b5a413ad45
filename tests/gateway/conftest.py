"""Fixtures for the gateway's HTTP tests: a real gateway (uvicorn on loopback, in the test's
event loop) in front of real fake upstreams (``tests.fakes.upstream``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx
import openai
import pytest
import uvicorn

from switchyard.core.config import Config, parse_config
from switchyard.http.app import create_app
from switchyard.http.server import serve_config
from tests.conftest import free_port
from tests.fakes.upstream import FakeUpstream

KEY = "sk-test-key"
MASTER = "sk-master-0123456789"


def base_config(models: list[dict[str, Any]], **extra: Any) -> Config:
    """A config for in-process gateways. No access log unless asked for (``logging={"access":
    True}``): its lines are asserted where it is tested, and elsewhere would only spill into
    pytest's output (a failure's captured stderr, or the terminal when the flush comes late)."""
    raw: dict[str, Any] = {
        "logging": {"access": False},
        "master_key": MASTER,
        "models": models,
        "teams": [{"name": "t"}],
        "keys": [{"id": "k1", "team": "t", "key": KEY}],
    }
    raw.update(extra)
    return parse_config(raw)


def upstream_model(name: str, url: str, dialect: str = "openai", **dep: Any) -> dict[str, Any]:
    return {"name": name, "deployments": [{"name": "d1", "backend": "upstream", "dialect": dialect,
                                           "base_url": url, **dep}]}


@asynccontextmanager
async def serve(config: Config, *, plain: bool = False, **app_kw: Any) -> AsyncIterator[httpx.AsyncClient]:
    """Start the gateway on a free port as ``switchyard serve`` does (``plain``: on uvicorn's own
    protocol, as another ASGI server would); yield a client pointed at it (with the test key)."""
    app = create_app(config, **app_kw)
    port = free_port()
    cfg = (uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
           if plain else serve_config(app, config, "127.0.0.1", port))
    cfg.loop = "asyncio"
    server = uvicorn.Server(cfg)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                     headers={"authorization": f"Bearer {KEY}"}) as client:
            client.app = app  # type: ignore[attr-defined]
            client.sdks = []  # type: ignore[attr-defined]  # openai_sdk's and anthropic_sdk's
            try:
                yield client
            finally:
                for sdk in client.sdks:  # type: ignore[attr-defined]
                    await sdk.close()
    finally:
        server.should_exit = True
        await task


def openai_sdk(gw: httpx.AsyncClient, key: str = KEY, timeout: float = 20) -> openai.AsyncOpenAI:
    """The openai SDK pointed at a gateway ``serve`` started (no retries), closed when it stops."""
    sdk = openai.AsyncOpenAI(api_key=key, base_url=f"{gw.base_url}/v1", max_retries=0, timeout=timeout)
    gw.sdks.append(sdk)  # type: ignore[attr-defined]
    return sdk


def anthropic_sdk(gw: httpx.AsyncClient, key: str = KEY, timeout: float = 20,
                  **kw: Any) -> anthropic.AsyncAnthropic:
    """The anthropic SDK pointed at a gateway ``serve`` started (no retries), closed when it stops."""
    sdk = anthropic.AsyncAnthropic(api_key=key, base_url=str(gw.base_url), max_retries=0, timeout=timeout,
                                   **kw)
    gw.sdks.append(sdk)  # type: ignore[attr-defined]
    return sdk


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as up:
        yield up


@pytest.fixture
def gateway_for() -> Callable[..., Any]:
    """``async with gateway_for(config) as client: ...``"""
    return serve
