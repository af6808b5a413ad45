"""One engine shared by several workers: a host serving attached workers over a unix socket, and
``switchyard serve --workers 2`` loading the model once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import yaml

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.deployments import DeploymentConfig, EngineConfig
from switchyard.core.errors import InvalidRequest
from switchyard.engine.host import EngineHost, HostedEngine
from tests.conftest import free_port
from tests.engine.test_backend import wait_ready
from tests.gateway.conftest import KEY
from tests.http.test_server import running


def req(**kw) -> CanonicalRequest:
    kw.setdefault("prompt", ["Hello world"])
    return CanonicalRequest(kind="completion", model="local/tiny", dialect="openai", **kw)


def dep(tiny_dir) -> DeploymentConfig:
    return DeploymentConfig(name="tiny", backend="engine",
                            engine=EngineConfig(path=str(tiny_dir), threads=1, max_batch=4))


async def texts(b: HostedEngine, r: CanonicalRequest) -> str:
    return "".join([c.text async for c in b.generate(r)])


async def test_workers_attached_to_one_host_share_its_engine(tiny_dir, tmp_path):
    host = EngineHost(dep(tiny_dir), str(tmp_path / "e.sock"))
    await host.start()
    a, b = HostedEngine(dep(tiny_dir), host.path), HostedEngine(dep(tiny_dir), host.path)
    try:
        await a.start()
        await b.start()
        await wait_ready(a)
        await wait_ready(b)
        assert a.context_window == b.context_window == host.engine.context_window == 256
        greedy = req(max_tokens=8, temperature=0)
        direct = "".join([c.text async for c in host.engine.generate(greedy)])
        both = await asyncio.gather(texts(a, greedy), texts(b, greedy), texts(a, greedy))
        assert both == [direct] * 3 and direct
        assert await a.count_tokens(req()) == await host.engine.count_tokens(req())
        with pytest.raises(InvalidRequest) as e:  # errors keep their class and param
            await texts(b, req(top_p=5.0))
        assert e.value.param == "top_p"
        # A worker that stops reading mid-stream frees the engine's sequence for the others.
        gen = a.generate(req(max_tokens=200, temperature=0, stream=True))
        await anext(gen)
        await gen.aclose()
        assert await asyncio.wait_for(texts(b, greedy), 30) == direct
    finally:
        await a.aclose()
        await b.aclose()
        await host.aclose()
    assert not os.path.exists(host.path)


def engine_processes(root: int, module: str = "switchyard.engine.process") -> list[int]:
    """Processes running ``module`` (the engine's by default) anywhere below ``root``."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    rows = [line.split(None, 2) for line in out.splitlines()]
    tree, found = {root}, []
    for _ in range(4):  # the supervisor, its workers, their children
        tree |= {int(p) for p, pp, _ in rows if int(pp) in tree}
    for p, _, args in rows:
        if int(p) in tree and module in args:
            found.append(int(p))
    return found


@contextlib.asynccontextmanager
async def two_workers(tmp_path, redis_url: str, model: str, deployment: dict[str, Any],
                      ready_tries: int = 600) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    """``serve --workers 2`` on Redis with one built-in ``deployment`` as ``model``, and a client
    that opens a new connection per request (so both workers serve), once both are ready."""
    team = f"hosted{os.getpid()}"
    cfg = {
        "server": {"host": "127.0.0.1", "port": free_port(), "shutdown_grace": 10},
        "store": {"url": redis_url},
        "models": [{"name": model, "deployments": [deployment]}],
        "teams": [{"name": team}],
        "keys": [{"id": "k1", "team": team, "key": KEY}],
    }
    path = tmp_path / "switchyard.yaml"
    path.write_text(yaml.safe_dump(cfg))
    async with running(path, "--workers", "2") as (proc, port):
        limits = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60, limits=limits,
                                     headers={"authorization": f"Bearer {KEY}"}) as client:
            for _ in range(ready_tries):  # each worker is ready once the host told it the model is loaded
                if [(await client.get("/ready")).status_code for _ in range(4)] == [200] * 4:
                    break
                await asyncio.sleep(0.1)
            yield proc, client


async def test_serve_with_two_workers_loads_the_model_once(tiny_dir, redis_url, tmp_path):
    engine = {"path": str(tiny_dir), "threads": 1, "max_batch": 4}
    dep = {"name": "tiny", "backend": "engine", "engine": engine}
    async with two_workers(tmp_path, redis_url, "local/tiny", dep) as (proc, client):
        body = {"model": "local/tiny", "prompt": "Hello", "max_tokens": 4, "temperature": 0}
        rs = await asyncio.gather(*(client.post("/v1/completions", json=body) for _ in range(8)))
        assert [r.status_code for r in rs] == [200] * 8, rs[0].text
        assert len({r.json()["choices"][0]["text"] for r in rs}) == 1  # one model, greedy
        assert len(engine_processes(proc.pid)) == 1
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
