from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engine import tiny


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny.build(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def roomy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with a 2048-token window: room for a tools system prompt in its small
    byte-level vocabulary."""
    return tiny.build(tmp_path_factory.mktemp("roomy"), context=2048)


@pytest.fixture(scope="session")
def tiny_loaded(tiny_dir: Path) -> Any:
    from switchyard.core.deployments import EngineConfig
    from switchyard.engine.loader import load

    return load(EngineConfig(path=str(tiny_dir), dtype="float32", threads=1))  # compared with HF in fp32


@pytest.fixture(scope="session")
def tiny_hf(tiny_dir: Path) -> Any:
    """transformers' own model from the same folder: the reference the engine is compared against."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()


class Collector:
    """Stands in for the channel: gathers each request's messages."""

    def __init__(self) -> None:
        self.msgs: dict[int, list[tuple[Any, ...]]] = {}

    def __call__(self, msg: tuple[Any, ...]) -> None:
        self.msgs.setdefault(msg[1], []).append(msg)


@pytest.fixture(scope="session")
def tiny_engine(tiny_loaded: Any) -> Any:
    from switchyard.engine.scheduler import Engine

    col = Collector()
    eng = Engine(tiny_loaded.model, tiny_loaded.tokenizer, col, max_batch=8)
    eng.collector = col
    return eng


_rid = iter(range(1, 10**9))


def submit(engine: Any, req: Any) -> int:
    rid = next(_rid)
    engine.submit(rid, req)
    return rid


def results(engine: Any, rid: int) -> list[Any]:
    """Chunks of a finished request; raises the error it ended with."""
    from switchyard.engine.channel import error_of

    out = []
    for msg in engine.collector.msgs.pop(rid, []):
        if msg[0] == "error":
            raise error_of(msg)
        if msg[0] == "chunk":
            out.append(msg[2])
    return out


def run(engine: Any, req: Any) -> list[Any]:
    rid = submit(engine, req)
    while engine.busy:
        engine.step()
    return results(engine, rid)


def text_of(chunks: list[Any], index: int = 0) -> str:
    return "".join(c.text for c in chunks if c.index == index)


def completion(prompt: Any = "Hello world", **kw: Any) -> Any:
    from switchyard.core.canonical import CanonicalRequest

    kw.setdefault("dialect", "openai")
    many = isinstance(prompt, list) and prompt and not isinstance(prompt[0], int)
    return CanonicalRequest(kind="completion", model="local/tiny", prompt=prompt if many else [prompt], **kw)


@asynccontextmanager
async def engine_gateway(path: str | None, **engine: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A real gateway (uvicorn on loopback) serving the engine as ``local/m``; yields a client once
    the model has loaded. ``path`` None is the default SmolLM2."""
    from tests.gateway.conftest import base_config, serve

    engine = {"path": path, "threads": 2, "max_batch": 4, **engine}
    config = base_config([{"name": "local/m", "deployments": [
        {"name": "engine", "backend": "engine", "engine": engine}]}])
    async with serve(config) as client:
        client.timeout = httpx.Timeout(120)
        for _ in range(1800):
            r = await client.post("/v1/completions", json={"model": "local/m", "prompt": "a",
                                                           "max_tokens": 0})
            if r.status_code != 503:
                assert r.status_code == 200, r.text
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the engine did not load in 180 s: {r.text}")
        yield client
