"""Reasoning from the cloud providers, through the gateway to the callers who asked for it (an
Anthropic caller's ``thinking``, a Responses caller's ``reasoning.summary``): Gemini's thought
parts, asked for with ``thinkingConfig`` only of the models that think (the fake refuses it from
the others, as Google does), and Bedrock Converse's ``reasoningContent``, asked of Claude with
``additionalModelRequestFields.thinking``. The fakes are tests/fakes/gemini.py and
tests/fakes/bedrock.py, calibrated with google-genai and boto3."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from tests.fakes.bedrock import FakeBedrock
from tests.fakes.bedrock import Reply as AwsReply
from tests.fakes.gemini import FakeGemini
from tests.fakes.gemini import Reply as GReply
from tests.gateway.conftest import KEY, base_config
from tests.providers.test_cloud_gateway import bedrock_dep, gemini_dep

ASK: Any = [{"role": "user", "content": "why?"}]
THINK: Any = {"type": "enabled", "budget_tokens": 2048}
THOUGHT, ANSWER = "weighing it up", "because"


def gemini_cfg(url: str, model: str) -> Any:
    return base_config([{"name": "cloud/m", "deployments": [gemini_dep(url, model=model)]}])


def claude(gw: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=str(gw.base_url), api_key=KEY, max_retries=0, timeout=20)


async def _ask(gw: Any, stream: bool, **kw: Any) -> anthropic.types.Message:
    kw = {"model": "cloud/m", "max_tokens": 4096, "messages": ASK, **kw}
    async with claude(gw) as c:  # its connection closed with it, not left to the collector
        if not stream:
            return await c.messages.create(**kw)
        async with c.messages.stream(**kw) as s:
            return await s.get_final_message()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_gemini_thoughts_asked_for_and_shown(gateway_for, stream) -> None:
    async with FakeGemini() as fake:
        fake.default = GReply(text=ANSWER, thought=THOUGHT)
        cfg = gemini_cfg(fake.url, "gemini-2.5-pro")
        async with gateway_for(cfg) as gw:
            msg = await _ask(gw, stream, thinking=THINK)
            config = fake.requests[-1].body["generationConfig"]
            assert config["thinkingConfig"] == {"includeThoughts": True, "thinkingBudget": 2048}
            assert [b.type for b in msg.content] == ["thinking", "text"]
            assert msg.content[0].thinking == THOUGHT and msg.content[1].text == ANSWER  # type: ignore[union-attr]
            # A budget past every Gemini's range is lowered to one all take (else a 400).
            big = {"type": "enabled", "budget_tokens": 50000}
            msg = await _ask(gw, stream, max_tokens=64000, thinking=big)
            assert fake.requests[-1].body["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 24576
            # A Responses caller asking for a summary: thoughts asked for, no budget.
            r = await gw.post("/v1/responses", json={"model": "cloud/m", "input": "why?", "stream": stream,
                                                      "reasoning": {"summary": "auto"}})
            assert r.status_code == 200, r.text
            assert fake.requests[-1].body["generationConfig"]["thinkingConfig"] == {"includeThoughts": True}
            assert THOUGHT in r.text
            # Not asked: nothing asked of Gemini, nothing shown.
            msg = await _ask(gw, stream)
            assert "thinkingConfig" not in fake.requests[-1].body.get("generationConfig", {})
            assert [b.type for b in msg.content] == ["text"]


@pytest.mark.parametrize("model", ["gemini-2.0-flash", "gemini-2.5-flash-image", "gemma-3-27b-it"])
async def test_gemini_models_that_do_not_think_get_no_thinking_config(gateway_for, model) -> None:
    """The fake answers a thinkingConfig to these with Google's 400: the caller gets its answer."""
    async with FakeGemini() as fake:
        fake.default = GReply(text=ANSWER)
        cfg = gemini_cfg(fake.url, model)
        async with gateway_for(cfg) as gw:
            msg = await _ask(gw, False, thinking=THINK)
    assert "thinkingConfig" not in fake.requests[-1].body.get("generationConfig", {})
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == ANSWER  # type: ignore[union-attr]


async def test_gemini_flash_lite_is_told_to_think(gateway_for) -> None:
    """Flash-Lite thinks only when told: thoughts asked without a budget send -1 (dynamic), which
    the fake (as Google) requires beside includeThoughts."""
    async with FakeGemini() as fake:
        fake.default = GReply(text=ANSWER, thought=THOUGHT)
        cfg = gemini_cfg(fake.url, "gemini-2.5-flash-lite")
        async with gateway_for(cfg) as gw:
            r = await gw.post("/v1/responses", json={"model": "cloud/m", "input": "why?",
                                                      "reasoning": {"summary": "detailed"}})
            assert r.status_code == 200, r.text
            assert fake.requests[-1].body["generationConfig"]["thinkingConfig"] == {
                "includeThoughts": True, "thinkingBudget": -1}
            assert [o["type"] for o in r.json()["output"]] == ["reasoning", "message"]
            msg = await _ask(gw, True, thinking=THINK)
            assert fake.requests[-1].body["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 2048
            assert msg.content[0].thinking == THOUGHT  # type: ignore[union-attr]


CLAUDE_4 = "us.anthropic.claude-sonnet-4-20250514-v1:0"


def bedrock_cfg(url: str, model: str) -> Any:
    return base_config([{"name": "cloud/m", "deployments": [bedrock_dep("b", url, model=model)]}],
                       router={"retries": 0})


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_bedrock_claude_thinks_when_asked_with_a_budget(gateway_for, stream) -> None:
    async with FakeBedrock() as aws:
        aws.default = AwsReply(text=ANSWER, reasoning=THOUGHT)
        async with gateway_for(bedrock_cfg(aws.url, CLAUDE_4)) as gw:
            msg = await _ask(gw, stream, thinking=THINK)
            sent = aws.requests[-1].body
            assert sent["additionalModelRequestFields"] == {"thinking": {"type": "enabled",
                                                                         "budget_tokens": 2048}}
            assert sent["inferenceConfig"]["maxTokens"] == 4096
            assert [b.type for b in msg.content] == ["thinking", "text"]
            assert msg.content[0].thinking == THOUGHT and msg.content[1].text == ANSWER  # type: ignore[union-attr]
            assert msg.content[0].signature == ""  # type: ignore[union-attr]  # Bedrock's not carried
            # Not asked: no thinking asked of Claude.
            msg = await _ask(gw, stream)
            assert "additionalModelRequestFields" not in aws.requests[-1].body
            assert [b.type for b in msg.content] == ["text"]
            # A summary asked without a budget: Claude on Converse cannot be asked (it needs one).
            r = await gw.post("/v1/responses", json={"model": "cloud/m", "input": "why?", "stream": stream,
                                                      "reasoning": {"summary": "auto"}})
            assert r.status_code == 200, r.text
            assert "additionalModelRequestFields" not in aws.requests[-1].body
            assert "response.reasoning_summary_text.delta" not in r.text and ANSWER in r.text


async def test_bedrock_claude_that_does_not_think_is_not_asked(gateway_for) -> None:
    async with FakeBedrock() as aws:
        aws.default = AwsReply(text=ANSWER)
        async with gateway_for(bedrock_cfg(aws.url, "anthropic.claude-3-5-sonnet-20240620-v1:0")) as gw:
            msg = await _ask(gw, False, thinking=THINK)
    assert "additionalModelRequestFields" not in aws.requests[-1].body
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == ANSWER  # type: ignore[union-attr]


async def test_thinking_budget_not_under_max_tokens_is_the_callers_400(gateway_for) -> None:
    """As Anthropic's API says it (Claude on Bedrock would refuse the same)."""
    async with FakeBedrock() as aws, gateway_for(bedrock_cfg(aws.url, CLAUDE_4)) as gw:
        with pytest.raises(anthropic.BadRequestError, match="max_tokens must be greater than thinking"):
            await _ask(gw, False, max_tokens=2048, thinking=THINK)
    assert aws.requests == []


async def test_adaptive_thinking_carries_no_budget(gateway_for) -> None:
    """``adaptive`` has no budget (one sent beside it is not read as one): Gemini gets thoughts
    asked without a budget, and a non-integer beside adaptive is no 500."""
    async with FakeGemini() as fake:
        fake.default = GReply(text=ANSWER, thought=THOUGHT)
        async with gateway_for(gemini_cfg(fake.url, "gemini-2.5-flash")) as gw:
            msg = await _ask(gw, False, thinking={"type": "adaptive"})
            assert fake.requests[-1].body["generationConfig"]["thinkingConfig"] == {"includeThoughts": True}
            assert msg.content[0].type == "thinking"
            r = await gw.post("/v1/messages", json={"model": "cloud/m", "max_tokens": 64, "messages": ASK,
                                                     "thinking": {"type": "adaptive", "budget_tokens": "x"}})
            assert r.status_code == 200, r.text


async def test_the_warning_names_the_budget_only_where_it_is_not_sent(gateway_for) -> None:
    """An Anthropic caller's thinking budget reaches Gemini's and Bedrock's thinking models: no
    warning of it there; a model that cannot take it is said to leave it out."""
    body = {"model": "cloud/m", "max_tokens": 4096, "messages": ASK, "thinking": THINK}

    def warned(r: Any) -> bool:
        assert r.status_code == 200, r.text
        return "thinking.budget_tokens" in r.headers.get("x-switchyard-warning", "")

    async with FakeGemini() as fake:
        fake.default = GReply(text=ANSWER)
        for model, says in (("gemini-2.5-pro", False), ("gemini-2.0-flash", True)):
            async with gateway_for(gemini_cfg(fake.url, model)) as gw:
                assert warned(await gw.post("/v1/messages", json=body)) is says, model
    async with FakeBedrock() as aws:
        aws.default = AwsReply(text=ANSWER)
        for model, says in ((CLAUDE_4, False), ("anthropic.claude-3-5-sonnet-20240620-v1:0", True)):
            async with gateway_for(bedrock_cfg(aws.url, model)) as gw:
                assert warned(await gw.post("/v1/messages", json=body)) is says, model
