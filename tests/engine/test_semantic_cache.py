"""Semantic response caching (docs/cache.md) with the built-in embedder (all-MiniLM-L6-v2, its own
process) behind a real gateway, in front of the fake upstream: a near-identical single-turn prompt
is served the earlier answer; another question, another system prompt, a second turn or a tool
list never is."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import base_config, serve

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw() -> AsyncIterator[tuple[Any, FakeUpstream]]:
    async with FakeUpstream() as up:
        cfg = base_config([
            {"name": "local/minilm", "deployments": [
                {"name": "embedder", "backend": "embedder", "engine": {"threads": 2, "max_batch": 8}}]},
            {"name": "v/m", "cache": {"mode": "semantic", "threshold": 0.9},
             "deployments": [{"name": "d1", "backend": "upstream", "base_url": up.url}]}])
        async with serve(cfg) as client:
            router = client.app.state.gateway.router  # type: ignore[attr-defined]
            for _ in range(1200):  # the model loads in the background (~10 s)
                if router.ready:
                    break
                await asyncio.sleep(0.05)
            yield client, up


def chat(text: str, system: str = "Answer in one word.", **more: Any) -> dict[str, Any]:
    return {"model": "v/m", "temperature": 0, "max_tokens": 3,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": text}], **more}


async def test_a_near_identical_prompt_gets_the_earlier_answer(gw) -> None:
    client, _ = gw
    first = await client.post("/v1/chat/completions", json=chat("What is the capital of France?"))
    near = await client.post("/v1/chat/completions", json=chat("what's the capital of France"))
    other = await client.post("/v1/chat/completions", json=chat("How do I bake sourdough bread?"))
    assert first.headers["x-switchyard-cache"] == "stored", first.text
    assert near.headers["x-switchyard-cache"] == "hit"
    assert near.headers["x-switchyard-cache-match"] == "semantic"
    assert near.json()["choices"] == first.json()["choices"]
    assert other.headers["x-switchyard-cache"] == "stored"
    # A streamed request is served from it too.
    streamed = await client.post("/v1/chat/completions", json=chat("What's the capital city of France?",
                                                                   stream=True))
    assert streamed.headers["x-switchyard-cache"] == "hit"


async def test_never_across_system_prompts_turns_or_tools(gw) -> None:
    client, up = gw
    seed = await client.post("/v1/chat/completions", json=chat("Name the largest planet."))
    assert seed.headers["x-switchyard-cache"] == "stored"
    before = len(up.requests)
    other_system = await client.post("/v1/chat/completions",
                                     json=chat("Name the largest planet!", system="Answer in French."))
    second_turn = chat("Name the largest planet!")
    second_turn["messages"][1:1] = [{"role": "user", "content": "hello"},
                                    {"role": "assistant", "content": "hi"}]
    turns = await client.post("/v1/chat/completions", json=second_turn)
    tools = await client.post("/v1/chat/completions", json=chat("Name the largest planet!", tools=[
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]))
    for r in (other_system, turns, tools):
        assert r.headers["x-switchyard-cache"] != "hit", r.headers
    assert len(up.requests) == before + 3

