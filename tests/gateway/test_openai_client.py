"""The official ``openai`` Python client against the real gateway: completions, chat, streaming,
errors. If the SDK can read it, so can the callers who use it."""

from __future__ import annotations

import openai
import pytest

from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import base_config, upstream_model
from tests.gateway.conftest import openai_sdk as client_for


@pytest.fixture
def cfg(upstream):  # type: ignore[no-untyped-def]
    return base_config([upstream_model("vendor/gpt", upstream.url, dialect="llamacpp", model="up")],
                       router={"retries": 0})


async def test_completions(cfg, gateway_for, upstream) -> None:
    async with gateway_for(cfg) as gw:
        oa = client_for(gw)
        c = await oa.completions.create(model="vendor/gpt", prompt="hi", max_tokens=3, seed=1,
                                        extra_body={"repeat_penalty": 1.1})
    assert c.object == "text_completion" and c.model == "vendor/gpt"
    assert c.choices[0].text == "w0 w1 w2" and c.choices[0].finish_reason == "length"
    assert c.usage is not None and c.usage.completion_tokens == 3
    assert c.usage.prompt_tokens_details is not None and c.usage.prompt_tokens_details.cached_tokens == 0
    assert c.system_fingerprint
    assert upstream.requests[0].body["repeat_penalty"] == 1.1


async def test_completions_stream_with_usage(cfg, gateway_for) -> None:
    async with gateway_for(cfg) as gw:
        oa = client_for(gw)
        stream = await oa.completions.create(model="vendor/gpt", prompt="hi", max_tokens=4, stream=True,
                                             stream_options={"include_usage": True})
        chunks = [ch async for ch in stream]
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == "w0 w1 w2 w3"
    assert all(ch.model == "vendor/gpt" for ch in chunks)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


async def test_chat(cfg, gateway_for, upstream) -> None:
    async with gateway_for(cfg) as gw:
        oa = client_for(gw)
        r = await oa.chat.completions.create(model="vendor/gpt", max_tokens=2,
                                             messages=[{"role": "user", "content": "hi"}])
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content == "w0 w1"
    assert r.usage is not None and r.usage.total_tokens == r.usage.prompt_tokens + 2
    assert upstream.requests[0].path.endswith("/chat/completions")


async def test_chat_stream(cfg, gateway_for) -> None:
    async with gateway_for(cfg) as gw:
        oa = client_for(gw)
        stream = await oa.chat.completions.create(model="vendor/gpt", max_tokens=3, stream=True,
                                                  messages=[{"role": "user", "content": "hi"}])
        chunks = [ch async for ch in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == "w0 w1 w2"
    assert chunks[-1].choices[0].finish_reason == "length"


async def test_models_list(cfg, gateway_for) -> None:
    async with gateway_for(cfg) as gw:
        models = [m.id async for m in client_for(gw).models.list()]
    assert models == ["vendor/gpt"]


async def test_sdk_errors(cfg, gateway_for, upstream) -> None:
    upstream.script.append(Behaviour(status=429, error="slow down"))
    async with gateway_for(cfg) as gw:
        oa = client_for(gw)
        with pytest.raises(openai.AuthenticationError):
            await client_for(gw, "sk-nope").completions.create(model="vendor/gpt", prompt="x")
        with pytest.raises(openai.BadRequestError) as e:
            await oa.completions.create(model="vendor/gpt", prompt="x", temperature=5)
        assert e.value.param == "temperature"
        with pytest.raises(openai.BadRequestError) as b:
            await oa.chat.completions.create(model="vendor/gpt", top_p=3,
                                             messages=[{"role": "user", "content": "x"}])
        assert "top_p" in str(b.value)
        with pytest.raises(openai.NotFoundError):
            await oa.completions.create(model="vendor/none", prompt="x")
        with pytest.raises(openai.RateLimitError):
            await oa.completions.create(model="vendor/gpt", prompt="x")
