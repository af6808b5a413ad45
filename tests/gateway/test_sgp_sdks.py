"""Both Scale GenAI Platform SDKs against the real gateway: ``scale-gp`` (``/v4/beta/...``, an
OpenAI-shaped body) and ``scale-gp-beta`` (``/v5/...``). Their stream decoders parse every data line
as JSON, so the streams end without [DONE]; a failure mid-stream reaches each as it can read it."""

from __future__ import annotations

import pytest
import scale_gp
import scale_gp_beta

from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import KEY, base_config, upstream_model

MODEL = "vendor/m"


@pytest.fixture
def cfg(upstream):  # type: ignore[no-untyped-def]
    return base_config([upstream_model(MODEL, upstream.url)], router={"retries": 0})


def v4(gw) -> scale_gp.AsyncSGPClient:  # type: ignore[no-untyped-def]
    return scale_gp.AsyncSGPClient(api_key=KEY, base_url=str(gw.base_url), max_retries=0, timeout=20)


def v5(gw) -> scale_gp_beta.AsyncSGPClient:  # type: ignore[no-untyped-def]
    return scale_gp_beta.AsyncSGPClient(api_key=KEY, account_id="acct", base_url=str(gw.base_url),
                                        max_retries=0, timeout=20)


async def test_scale_gp_openai_shaped_body(upstream, gateway_for) -> None:
    """logprobs as a count, echo, a prompt list: read, sent on, answered as CompletionV5."""
    cfg = base_config([upstream_model(MODEL, upstream.url),
                       upstream_model("vendor/s", upstream.url, dialect="sgp")], router={"retries": 0})
    async with gateway_for(cfg) as gw, v4(gw) as client:
        c = await client.beta.completions.create(model=MODEL, prompt="say it", max_tokens=2,
                                                 logprobs=1, echo=True)
        two = await client.beta.completions.create(model="vendor/s", prompt=["one", "two"], max_tokens=2)
    sent = upstream.requests[0].body
    assert sent["prompt"] == "say it" and sent["logprobs"] == 1 and sent["echo"] is True
    assert c.choices[0].text == "say itw0 w1"
    lp = c.choices[0].logprobs
    assert lp is not None and lp.tokens == ["say", " it", "w0", " w1"]
    assert lp.token_logprobs == [None, -0.5, -1.0, -1.0] and lp.text_offset == [0, 3, 6, 8]
    # an SGP upstream takes one string prompt: one call per prompt, choices numbered as one call
    assert sorted(x.body["prompt"] for x in upstream.requests[1:]) == ["one", "two"]
    assert [(x.index, x.text) for x in two.choices] == [(0, "w0 w1"), (1, "w0 w1")]
    assert two.usage is not None and two.usage.completion_tokens == 4


async def test_scale_gp_stream_has_no_done_and_usage_rides_a_choice(cfg, gateway_for) -> None:
    async with gateway_for(cfg) as gw, v4(gw) as client:
        stream = await client.beta.completions.create(model=MODEL, prompt="hi", max_tokens=3, stream=True)
        chunks = [ch async for ch in stream]
    assert "".join(ch.choices[0].text for ch in chunks) == "w0 w1 w2"  # every event has a choice
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


async def test_scale_gp_raises_on_a_failure_mid_stream(cfg, gateway_for, upstream) -> None:
    upstream.script.append(Behaviour(cut_after=2))
    async with gateway_for(cfg) as gw, v4(gw) as client:
        stream = await client.beta.completions.create(model=MODEL, prompt="hi", max_tokens=5, stream=True)
        got = []
        with pytest.raises(scale_gp.APIStatusError) as e:
            async for ch in stream:
                got.append(ch.choices[0].text)
    assert got == ["w0", " w1"]
    assert "broke off" in str(e.value.body)


async def test_scale_gp_beta_chat(cfg, gateway_for, upstream) -> None:
    async with gateway_for(cfg) as gw, v4(gw) as client:
        chat = await client.beta.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert chat.choices[0].message.content == "w0 w1"  # type: ignore[union-attr]
    assert upstream.requests[0].path.endswith("/chat/completions")


async def test_scale_gp_beta_sdk_v5_completions_and_chat(cfg, gateway_for) -> None:
    async with gateway_for(cfg) as gw, v5(gw) as client:
        c = await client.completions.create(model=MODEL, prompt="hi", max_tokens=2, logprobs=0)
        stream = await client.completions.create(model=MODEL, prompt="hi", max_tokens=2, stream=True)
        pieces = [ch.choices[0].text async for ch in stream]
        chat = await client.chat.completions.create(model=MODEL, max_tokens=2,
                                                    messages=[{"role": "user", "content": "hi"}])
        chat_stream = await client.chat.completions.create(
            model=MODEL, max_tokens=2, stream=True, messages=[{"role": "user", "content": "hi"}])
        deltas = [ch.choices[0].delta.content or "" async for ch in chat_stream]
    assert c.choices[0].text == "w0 w1" and c.choices[0].logprobs is not None
    assert c.choices[0].logprobs.token_logprobs == [-1.0, -1.0]
    assert "".join(pieces) == "w0 w1"
    assert chat.choices[0].message.content == "w0 w1"  # type: ignore[union-attr]
    assert "".join(deltas) == "w0 w1"


async def test_scale_gp_beta_sees_a_failure_mid_stream(cfg, gateway_for, upstream) -> None:
    """scale-gp-beta skips named events: the error comes as data, read into the object it yields."""
    upstream.script.append(Behaviour(cut_after=1))
    async with gateway_for(cfg) as gw, v5(gw) as client:
        stream = await client.completions.create(model=MODEL, prompt="hi", max_tokens=5, stream=True)
        items = [ch async for ch in stream]
    assert items[0].choices[0].text == "w0"
    assert "broke off" in items[-1].error["message"]  # type: ignore[attr-defined]


async def test_sgp_validation_errors_are_its_fastapi_422(cfg, gateway_for, upstream) -> None:
    async with gateway_for(cfg) as gw, v4(gw) as old, v5(gw) as new:
        with pytest.raises(scale_gp.UnprocessableEntityError) as e4:
            await old.beta.completions.create(model=MODEL, prompt="x", logprobs=9)
        with pytest.raises(scale_gp_beta.UnprocessableEntityError) as e5:
            await new.completions.create(model=MODEL, prompt="x", temperature=5)
        with pytest.raises(scale_gp_beta.AuthenticationError):
            await new.with_options(api_key="sk-wrong").completions.create(model=MODEL, prompt="x")
    assert e4.value.body["detail"][0]["loc"] == ["body", "logprobs"]  # type: ignore[index]
    assert e5.value.body["detail"][0]["loc"] == ["body", "temperature"]  # type: ignore[index]
    assert upstream.requests == []
