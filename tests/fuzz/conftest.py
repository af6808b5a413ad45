"""A live gateway for the fuzz tests: uvicorn on loopback, as ``switchyard serve`` runs it, in a
thread of its own (the fuzzers are synchronous clients), in front of a real loopback upstream."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn

from switchyard.core.config import Config, parse_config
from switchyard.http.app import create_app
from switchyard.http.server import serve_config
from tests.conftest import free_port
from tests.fakes.upstream import FakeUpstream

KEY = "sk-fuzz-key"
MASTER = "sk-fuzz-master-key-0001"
UPSTREAM_KEY = "sk-fuzz-upstream-secret"
SECRETS = (KEY, MASTER, UPSTREAM_KEY)


def fuzz_config(upstream_url: str) -> Config:
    def model(name: str, dialect: str) -> dict[str, Any]:
        # A window keeps fuzzed max_tokens from asking the fake upstream for a billion words.
        return {"name": name, "context_window": 256,
                "deployments": [{"name": "d1", "dialect": dialect, "base_url": upstream_url,
                                 "api_key": UPSTREAM_KEY}]}

    return parse_config({
        "master_key": MASTER,
        "models": [model("v/openai", "openai"), model("v/sgp", "sgp"), model("v/llama", "llamacpp"),
                   model("v/*", "openai")],
        "teams": [{"name": "t"}],
        "keys": [{"id": "k1", "team": "t", "key": KEY}],
    })


@dataclass
class Live:
    url: str
    upstream: FakeUpstream
    app: Any


@pytest.fixture(scope="package")
def live() -> Iterator[Live]:
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        async with FakeUpstream() as up:
            config = fuzz_config(up.url)
            app = create_app(config)
            port = free_port()
            cfg = serve_config(app, config, "127.0.0.1", port)
            cfg.loop = "asyncio"
            server = uvicorn.Server(cfg)
            task = asyncio.ensure_future(server.serve())
            while not server.started:
                await asyncio.sleep(0.01)
            box.update(live=Live(f"http://127.0.0.1:{port}", up, app), server=server)
            ready.set()
            await task

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    if not ready.wait(30):
        pytest.fail("the fuzz gateway did not start within 30 s", pytrace=False)
    yield box["live"]
    box["server"].should_exit = True
    thread.join(15)
