"""One ``echo`` for every chat-only provider: legacy /v1/completions with ``echo: true`` answers the
prompt then the completion, concatenated as OpenAI does (no separator), whether the upstream is
Anthropic, Gemini, Bedrock (Converse or InvokeModel Claude) or an OpenAI-compatible chat-only API
(Mistral); streamed too. Echo with logprobs (the prompt's own logprobs, which no chat API gives) is
a 400 naming ``echo``, the same everywhere. Real fakes on loopback throughout."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest

from tests.fakes import bedrock as aws
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.bedrock import FakeBedrock
from tests.fakes.gemini import API_KEY as GEMINI_KEY
from tests.fakes.gemini import FakeGemini
from tests.fakes.upstream import Behaviour, FakeUpstream
from tests.gateway.conftest import base_config
from tests.gateway.helpers import sse_objects

PROMPT = "Once upon a time,"
BEDROCK = {"provider": "bedrock", "region": aws.REGION, "model": "anthropic.claude-3-5-sonnet-20240620-v1:0",
           "aws_access_key_id": aws.ACCESS_KEY, "aws_secret_access_key": aws.SECRET_KEY}


@asynccontextmanager
async def anthropic() -> AsyncIterator[tuple[dict[str, Any], str]]:
    async with FakeAnthropic() as up:
        yield {"provider": "anthropic", "base_url": up.url, "api_key": up.key, "model": "claude-up"}, \
            "Hello from Claude"


@asynccontextmanager
async def gemini() -> AsyncIterator[tuple[dict[str, Any], str]]:
    async with FakeGemini() as up:
        yield {"provider": "gemini", "base_url": up.url, "api_key": GEMINI_KEY,
               "model": "gemini-2.5-flash"}, "Hello from Gemini"


@asynccontextmanager
async def bedrock() -> AsyncIterator[tuple[dict[str, Any], str]]:
    async with FakeBedrock() as up:
        yield {**BEDROCK, "base_url": up.url}, "Hello from Bedrock"


@asynccontextmanager
async def bedrock_invoke() -> AsyncIterator[tuple[dict[str, Any], str]]:
    from tests.fakes.bedrock_claude import FakeBedrockClaude

    async with FakeBedrockClaude() as up:
        yield {**BEDROCK, "base_url": up.url, "api": "invoke"}, "Hello from Claude"


@asynccontextmanager
async def mistral() -> AsyncIterator[tuple[dict[str, Any], str]]:
    async with FakeUpstream() as up:
        up.default = Behaviour(text="Hello from Mistral")
        yield {"provider": "mistral", "base_url": up.url, "api_key": "sk-m", "model": "mistral-small"}, \
            "Hello from Mistral"


Upstream = Callable[[], AbstractAsyncContextManager[tuple[dict[str, Any], str]]]
PROVIDERS: list[Upstream] = [anthropic, gemini, bedrock, bedrock_invoke, mistral]


def _config(dep: dict[str, Any]) -> Any:
    deps = [{"name": "d", "backend": "upstream", **dep}]
    return base_config([{"name": "v/chat-only", "deployments": deps}])


@pytest.mark.parametrize("upstream", PROVIDERS, ids=lambda u: u.__name__)
async def test_echo_is_the_prompt_then_the_completion(gateway_for, upstream: Upstream) -> None:
    async with upstream() as (dep, said), gateway_for(_config(dep)) as client:
        body = {"model": "v/chat-only", "prompt": PROMPT, "max_tokens": 20, "echo": True}
        whole = await client.post("/v1/completions", json=body)
        streamed = await client.post("/v1/completions", json={**body, "stream": True})
        plain = await client.post("/v1/completions", json={**body, "echo": False})
    assert whole.status_code == 200, whole.text
    assert whole.json()["choices"][0]["text"] == PROMPT + said
    assert streamed.status_code == 200, streamed.text
    texts = [c["choices"][0]["text"] for c in sse_objects(streamed.text) if c["choices"]]
    assert "".join(texts) == PROMPT + said
    assert plain.status_code == 200, plain.text  # echo: false asks nothing of anyone
    assert plain.json()["choices"][0]["text"] == said


@pytest.mark.parametrize("upstream", PROVIDERS, ids=lambda u: u.__name__)
async def test_echo_with_logprobs_is_refused_naming_echo(gateway_for, upstream: Upstream) -> None:
    async with upstream() as (dep, _), gateway_for(_config(dep)) as client:
        r = await client.post("/v1/completions", json={"model": "v/chat-only", "prompt": PROMPT,
                                                       "max_tokens": 1, "echo": True, "logprobs": 1})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "echo" and "echo with logprobs" in err["message"], err
