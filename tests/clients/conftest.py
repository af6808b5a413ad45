"""One real gateway for the whole client suite, on loopback, in a thread of its own (the SDKs under
test are called synchronously, as most callers use them): the built-in engine on the tiny test
model (``local/tiny``), an OpenAI-dialect loopback upstream (``vendor/up``) and the same upstream
as a Fireworks route that takes Fireworks' own model names (``fireworks/*``). The suite records
every cell's outcome and writes ``docs/clients.md`` when the whole matrix has run."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from switchyard.http.app import create_app
from switchyard.http.server import serve_config
from tests.conftest import free_port
from tests.engine import tiny
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import KEY, base_config

# LiteLLM fetches its model price map from the network at import unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ENGINE, UPSTREAM = "local/tiny", "vendor/up"


@dataclass
class Gateway:
    url: str  # http://127.0.0.1:PORT
    upstream: FakeUpstream
    # Texts the gateway answers over plain HTTP, per route: what every SDK must read back.
    expect: dict[tuple[str, str], str] = field(default_factory=dict)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(self.url + path, json=body, headers={"authorization": f"Bearer {KEY}"}, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()


class _Served:
    """The gateway and the upstream, run by an event loop in a daemon thread."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.up = FakeUpstream()
        self.started = threading.Event()
        self.error: BaseException | None = None
        self.server: uvicorn.Server | None = None
        self.thread = threading.Thread(target=self._run, name="client-suite-gateway", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as e:  # reported to the fixture, which fails with it
            self.error = e
            self.started.set()

    async def _serve(self) -> None:
        async with self.up:
            config = base_config([
                {"name": ENGINE, "deployments": [{"name": "engine", "backend": "engine", "engine": {
                    "path": str(self.model_dir), "threads": 1, "max_batch": 4}}]},
                {"name": UPSTREAM, "deployments": [{"name": "d1", "backend": "upstream",
                                                    "dialect": "openai", "base_url": self.up.url}]},
                {"name": "fireworks/*", "aliases": ["accounts/fireworks/models/*"], "deployments": [
                    {"name": "fw", "backend": "upstream", "dialect": "fireworks", "base_url": self.up.url}]},
            ], router={"retries": 0})
            cfg = serve_config(create_app(config), config, "127.0.0.1", self.port)
            cfg.loop = "asyncio"
            self.server = uvicorn.Server(cfg)
            task = asyncio.create_task(self.server.serve())
            while not self.server.started and not task.done():
                await asyncio.sleep(0.01)
            self.started.set()
            await task

    def stop(self) -> None:
        if self.server is not None:
            self.loop.call_soon_threadsafe(setattr, self.server, "should_exit", True)
        self.thread.join(30)


def _wait_ready(url: str) -> None:
    for _ in range(1200):
        r = httpx.get(url + "/ready", timeout=5)
        if r.status_code == 200:
            return
        threading.Event().wait(0.1)
    pytest.fail(f"the gateway's engine did not load in 120 s: {r.text}", pytrace=False)


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    # A 2048-token window: room for a tool's system prompt in the tiny model's small vocabulary.
    served = _Served(tiny.build(tmp_path_factory.mktemp("clients-tiny"), context=2048))
    served.thread.start()
    served.started.wait(60)
    if served.error is not None or not served.started.is_set():
        pytest.fail(f"the gateway did not start: {served.error!r}", pytrace=False)
    gw = Gateway(f"http://127.0.0.1:{served.port}", served.up)
    try:
        _wait_ready(gw.url)
        for route in (ENGINE, UPSTREAM):
            gw.expect[route, "completion"] = gw.post("/v1/completions", {
                "model": route, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0})[
                "choices"][0]["text"]
            gw.expect[route, "chat"] = gw.post("/v1/chat/completions", {
                "model": route, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_TOKENS,
                "temperature": 0})["choices"][0]["message"]["content"]
            gw.expect[route, "parts"] = gw.post("/v1/chat/completions", {
                "model": route, "messages": [{"role": "user", "content": "\n".join(PARTS)}],
                "max_tokens": MAX_TOKENS, "temperature": 0})["choices"][0]["message"]["content"]
        yield gw
    finally:
        served.stop()


PROMPT = "The quick brown fox"
PARTS = ["The quick", "brown fox"]  # as content parts; the engine reads them joined by newlines
MAX_TOKENS = 5
GREEDY: dict[str, Any] = {"max_tokens": MAX_TOKENS, "temperature": 0}  # deterministic on the engine


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """LiteLLM's own types trip a pydantic warning at first use: not the gateway's concern."""
    for item in items:
        if item.path.parent == Path(__file__).parent:
            item.add_marker(pytest.mark.filterwarnings("ignore:Item .* `ReadOnly` qualifier:UserWarning"))


# --- the results table ---------------------------------------------------------------------------

RESULTS: dict[tuple[str, str, str], tuple[str, str]] = {}  # (client, call, route) -> (outcome, why)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    cell = getattr(item, "callspec", None)
    params = cell.params if cell is not None else {}
    if "cell" in params and (report.when == "call" or (report.when == "setup" and report.failed)):
        from tests.clients.matrix import outcome

        RESULTS[params["cell"].key(params["route"])] = outcome(report, call)
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests.clients.matrix import write_doc

    write_doc(RESULTS)
