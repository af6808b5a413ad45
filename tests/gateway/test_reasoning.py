"""Reasoning from an OpenAI-family upstream that writes it as text (``reasoning_content``, as
DeepSeek, llama.cpp and vLLM's reasoning parsers do; ``reasoning``, as newer vLLM does), carried to
the callers who asked for it: Anthropic Messages callers (``thinking``) get ``thinking`` blocks,
Responses callers (``reasoning.summary``) a ``reasoning`` item. The official SDKs read every answer
and stream; callers who did not ask get none of it."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import anthropic_sdk as claude
from tests.gateway.conftest import base_config, upstream_model
from tests.gateway.conftest import openai_sdk as oai

MODEL = "vendor/r1"
THOUGHT, ANSWER = "first this then that", "the answer"
THINK = {"type": "enabled", "budget_tokens": 1024}
ASK: Any = [{"role": "user", "content": "why?"}]
_EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


@pytest.fixture
def cfg(upstream):  # type: ignore[no-untyped-def]
    upstream.default = Behaviour(text=ANSWER, reasoning=THOUGHT)
    return base_config([upstream_model(MODEL, upstream.url, model="deepseek-reasoner")],
                       router={"retries": 0})


def events_of(sse: str) -> list[Any]:
    """Every event of a Responses stream, validated by the SDK's own event models."""
    return [_EVENTS.validate_json(line[6:]) for line in sse.splitlines() if line.startswith("data: ")]


async def test_the_fake_writes_reasoning_as_the_openai_sdk_reads_it(upstream) -> None:
    """Calibration: the openai SDK, pointed at the fake, keeps the field beside content."""
    upstream.default = Behaviour(text=ANSWER, reasoning=THOUGHT)
    async with openai.AsyncOpenAI(base_url=upstream.url, api_key="x", max_retries=0) as c:
        whole = await c.chat.completions.create(model="m", messages=ASK)
        pieces = [((d.model_extra or {}).get("reasoning_content"), d.content)
                  async for ch in await c.chat.completions.create(model="m", messages=ASK, stream=True)
                  for d in (ch.choices[0].delta,)]
    assert (whole.choices[0].message.model_extra or {})["reasoning_content"] == THOUGHT
    assert "".join(r or "" for r, _ in pieces) == THOUGHT
    assert "".join(t or "" for _, t in pieces) == ANSWER


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_anthropic_caller_asking_for_thinking_gets_a_thinking_block(cfg, gateway_for, upstream,
                                                                        field) -> None:
    upstream.default = Behaviour(text=ANSWER, reasoning=THOUGHT, reasoning_field=field)
    async with gateway_for(cfg) as gw:
        msg = await claude(gw).messages.create(model=MODEL, max_tokens=2048, messages=ASK, thinking=THINK)  # type: ignore[arg-type]
    assert [b.type for b in msg.content] == ["thinking", "text"]
    block = msg.content[0]
    assert isinstance(block, anthropic.types.ThinkingBlock)
    assert block.thinking == THOUGHT and block.signature == ""  # only Anthropic signs thinking
    assert msg.content[1].text == ANSWER  # type: ignore[union-attr]


async def test_anthropic_stream_carries_thinking_deltas(cfg, gateway_for) -> None:
    async with gateway_for(cfg) as gw, claude(gw).messages.stream(
            model=MODEL, max_tokens=2048, messages=ASK, thinking=THINK) as s:  # type: ignore[arg-type]
        events = [ev async for ev in s]
        final = await s.get_final_message()
    deltas = [ev.delta for ev in events if ev.type == "content_block_delta"]
    assert "".join(d.thinking for d in deltas if d.type == "thinking_delta") == THOUGHT
    assert "".join(d.text for d in deltas if d.type == "text_delta") == ANSWER
    starts = [ev.content_block.type for ev in events if ev.type == "content_block_start"]
    assert starts == ["thinking", "text"]
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == THOUGHT and final.content[0].signature == ""  # type: ignore[union-attr]
    # The caller sends the thinking back in its next turn, as Claude Code does: it is not sent on.
    async with gateway_for(cfg) as gw:
        again = await claude(gw).messages.create(
            model=MODEL, max_tokens=2048, thinking=THINK,  # type: ignore[arg-type]
            messages=[*ASK, {"role": "assistant", "content": [b.model_dump() for b in final.content]},  # type: ignore[list-item, misc]
                      {"role": "user", "content": "and?"}])
    assert again.content[-1].text == ANSWER  # type: ignore[union-attr]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_anthropic_caller_not_asking_gets_no_thinking(cfg, gateway_for, stream) -> None:
    async with gateway_for(cfg) as gw:
        if stream:
            async with claude(gw).messages.stream(model=MODEL, max_tokens=64, messages=ASK) as s:
                starts = [ev.content_block.type async for ev in s if ev.type == "content_block_start"]
                msg = await s.get_final_message()
            assert starts == ["text"]
        else:
            msg = await claude(gw).messages.create(model=MODEL, max_tokens=64, messages=ASK)
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == ANSWER  # type: ignore[union-attr]


async def test_responses_caller_asking_for_a_summary_gets_a_reasoning_item(cfg, gateway_for) -> None:
    async with gateway_for(cfg) as gw:
        raw = await oai(gw).responses.with_raw_response.create(model=MODEL, input="why?",
                                                               reasoning={"summary": "auto"})
    r = Response.model_validate(json.loads(raw.content))
    assert [o.type for o in r.output] == ["reasoning", "message"]
    item = r.output[0]
    assert item.type == "reasoning" and [s.text for s in item.summary] == [THOUGHT]
    assert r.output_text == ANSWER


async def test_responses_stream_carries_the_summary(cfg, gateway_for) -> None:
    async with gateway_for(cfg) as gw:
        got = await gw.post("/v1/responses", json={"model": MODEL, "input": "why?", "stream": True,
                                                    "reasoning": {"effort": "high", "summary": "auto"}})
    events = events_of(got.text)
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.reasoning_summary_part.added"]
    assert types.index("response.reasoning_summary_part.done") < types.index("response.output_text.delta")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    done = events[-1].response
    assert deltas == THOUGHT and done.status == "completed"
    assert [o.type for o in done.output] == ["reasoning", "message"]
    assert done.output[0].summary[0].text == THOUGHT and done.output_text == ANSWER
    # And through the SDK's stream helper, which assembles the same.
    async with gateway_for(cfg) as gw, oai(gw).responses.stream(
            model=MODEL, input="why?", reasoning={"summary": "auto"}) as s:
        final = await s.get_final_response()
    assert final.output[0].type == "reasoning" and final.output_text == ANSWER


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_responses_caller_not_asking_gets_no_reasoning_item(cfg, gateway_for, stream) -> None:
    async with gateway_for(cfg) as gw:
        got = await gw.post("/v1/responses", json={"model": MODEL, "input": "why?", "stream": stream,
                                                    "reasoning": {"effort": "low"}})
    body = events_of(got.text)[-1].response if stream else Response.model_validate(got.json())
    assert [o.type for o in body.output] == ["message"] and body.output_text == ANSWER


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_reasoning_before_a_tool_call(cfg, gateway_for, stream) -> None:
    """Reasoning that led to a call comes before it: a thinking block then tool_use; a reasoning
    item then the function_call item."""
    weather = {"name": "weather", "input_schema": {"type": "object", "properties": {}}}
    async with gateway_for(cfg) as gw:
        kw: Any = {"model": MODEL, "max_tokens": 2048, "messages": ASK, "thinking": THINK,
                   "tools": [weather], "tool_choice": {"type": "tool", "name": "weather"}}
        if stream:
            async with claude(gw).messages.stream(**kw) as s:
                msg = await s.get_final_message()
        else:
            msg = await claude(gw).messages.create(**kw)
        r = await gw.post("/v1/responses", json={
            "model": MODEL, "input": "why?", "stream": stream, "reasoning": {"summary": "auto"},
            "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "weather"}})
    assert [b.type for b in msg.content] == ["thinking", "tool_use"] and msg.stop_reason == "tool_use"
    assert msg.content[0].thinking == THOUGHT  # type: ignore[union-attr]
    if stream:
        events = events_of(r.text)
        assert [e.sequence_number for e in events] == list(range(len(events)))
        got = events[-1].response
    else:
        got = Response.model_validate(r.json())
    assert [o.type for o in got.output] == ["reasoning", "function_call"]
    assert got.output[0].summary[0].text == THOUGHT


async def test_chat_caller_gets_reasoning_content_as_deepseek_writes_it(cfg, gateway_for, upstream) -> None:
    """An OpenAI chat caller gets the backend's reasoning back as ``reasoning_content`` (whole:
    on the message; streamed: on deltas, before the content), read by the openai SDK as the
    fake's own calibration reads it; a backend that wrote none adds no field."""
    async with gateway_for(cfg) as gw:
        c = oai(gw)
        whole = await c.chat.completions.create(model=MODEL, messages=ASK)
        msg = whole.choices[0].message
        assert (msg.model_extra or {})["reasoning_content"] == THOUGHT and msg.content == ANSWER
        pieces = [(ch.choices[0].delta.model_extra or {}, ch.choices[0].delta.content)
                  async for ch in await c.chat.completions.create(model=MODEL, messages=ASK, stream=True)
                  if ch.choices]
        assert "".join(x.get("reasoning_content") or "" for x, _ in pieces) == THOUGHT
        assert "".join(t or "" for _, t in pieces) == ANSWER
        first_text = next(i for i, (_, t) in enumerate(pieces) if t)
        assert all("reasoning_content" not in x for x, _ in pieces[first_text:])  # reasoning came first
        upstream.default = Behaviour(text=ANSWER)
        raw = await gw.post("/v1/chat/completions", json={"model": MODEL, "messages": ASK})
        assert "reasoning_content" not in raw.json()["choices"][0]["message"]
        raw = await gw.post("/v1/chat/completions", json={"model": MODEL, "messages": ASK, "stream": True})
        assert "reasoning_content" not in raw.text and ANSWER.split()[0] in raw.text
