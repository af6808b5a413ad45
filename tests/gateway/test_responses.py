"""``POST /v1/responses`` with the official ``openai`` SDK unmodified, over an OpenAI-dialect
upstream that receives chat completions: whole and streamed answers, a function-tool round trip,
what Codex sends, and the stateless refusals. The SDK parses every answer into its own models, so
a missing field or a malformed event sequence fails here."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import base_config, upstream_model
from tests.gateway.conftest import openai_sdk as client_for

_EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
WEATHER = {"type": "function", "name": "weather", "description": "the weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Oslo"]}},
                          "required": ["city"]}}


def _events(sse: str) -> list[Any]:
    """Every event of a stream, validated by the SDK's own event models."""
    return [_EVENTS.validate_json(line[6:]) for line in sse.splitlines() if line.startswith("data: ")]


@pytest.fixture
def cfg(upstream):  # type: ignore[no-untyped-def]
    return base_config([upstream_model("vendor/gpt", upstream.url, model="up")], router={"retries": 0})


async def test_create_translates_to_chat(cfg, gateway_for, upstream) -> None:
    async with gateway_for(cfg) as gw:
        r = await client_for(gw).responses.create(
            model="vendor/gpt", instructions="be brief", max_output_tokens=3, temperature=0.5,
            input=[{"role": "developer", "content": "rules"},
                   {"role": "user", "content": [{"type": "input_text", "text": "hi "},
                                                {"type": "input_text", "text": "there"}]}],
            metadata={"a": "b"}, user="u1", store=True)
    assert r.object == "response" and r.model == "vendor/gpt" and r.status == "incomplete"
    assert r.output_text == "w0 w1 w2"
    assert r.usage is not None and r.usage.output_tokens == 3
    assert r.usage.total_tokens == r.usage.input_tokens + 3
    assert r.usage.input_tokens_details.cached_tokens == 0
    assert r.incomplete_details is not None and r.incomplete_details.reason == "max_output_tokens"
    sent = upstream.requests[0]
    assert sent.path.endswith("/chat/completions")
    assert sent.body["messages"] == [{"role": "system", "content": "be brief"},
                                     {"role": "system", "content": "rules"},
                                     {"role": "user", "content": "hi there"}]
    assert sent.bound == 3 and sent.body["temperature"] == 0.5 and sent.body["user"] == "u1"
    assert "metadata" not in sent.body and "store" not in sent.body


async def test_stream_event_sequence(cfg, gateway_for, upstream) -> None:
    upstream.default = Behaviour(text="hello there world")
    async with gateway_for(cfg) as gw:
        stream = await client_for(gw).responses.create(model="vendor/gpt", input="hi", stream=True)
        events = [e async for e in stream]
    types = [e.type for e in events]
    assert types == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * 3,
                     "response.output_text.done", "response.content_part.done",
                     "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-1].response
    assert done.status == "completed" and done.output_text == "hello there world"
    assert done.usage is not None and done.usage.output_tokens == 3
    assert len({getattr(e, "response", done).id for e in events}) == 1


async def test_stream_helper_accumulates(cfg, gateway_for, upstream) -> None:
    upstream.default = Behaviour(text="a b")
    async with gateway_for(cfg) as gw, \
            client_for(gw).responses.stream(model="vendor/gpt", input="hi") as stream:
        texts = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(texts) == "a b" == final.output_text


@pytest.mark.parametrize("stream", [False, True])
async def test_function_tool_round_trip(cfg, gateway_for, upstream, stream) -> None:
    async with gateway_for(cfg) as gw:
        oa = client_for(gw)
        ask: list[Any] = [{"role": "user", "content": "weather in Oslo?"}]
        kw = {"model": "vendor/gpt", "tools": [WEATHER],
              "tool_choice": {"type": "function", "name": "weather"}}
        if stream:
            async with oa.responses.stream(input=ask, **kw) as s:
                kinds = [e.type async for e in s]
                first = await s.get_final_response()
            assert "response.function_call_arguments.delta" in kinds
            assert "response.function_call_arguments.done" in kinds
        else:
            first = await oa.responses.create(input=ask, **kw)
        call = next(o for o in first.output if o.type == "function_call")
        assert call.name == "weather" and json.loads(call.arguments) == {"city": "Oslo"}
        assert call.call_id == "call_up"
        # The caller runs the tool and sends the whole conversation back (stateless).
        second = await oa.responses.create(
            model="vendor/gpt", tools=[WEATHER], max_output_tokens=2,
            input=[*ask, {"type": "function_call", "call_id": call.call_id, "name": call.name,
                          "arguments": call.arguments},
                   {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    assert second.output_text == "w0 w1"
    sent = upstream.requests[-1].body
    assert sent["tools"] == [{"type": "function", "function": {
        k: WEATHER[k] for k in ("name", "description", "parameters")}}]
    assert sent["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_up", "type": "function",
             "function": {"name": "weather", "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": "call_up", "content": "sunny"}]
    assert upstream.requests[0].body["tool_choice"] == {"type": "function", "function": {"name": "weather"}}


async def test_json_schema_text_format(cfg, gateway_for, upstream) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"],
              "additionalProperties": False}
    async with gateway_for(cfg) as gw:
        r = await client_for(gw).responses.create(
            model="vendor/gpt", input="hi", max_output_tokens=1,
            text={"format": {"type": "json_schema", "name": "thing", "schema": schema, "strict": True}})
    assert r.text is not None and r.text.format is not None and r.text.format.type == "json_schema"
    rf = upstream.requests[0].body["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["schema"] == schema


CODEX = {  # the shape of Codex 0.169's request (providers.md appendix), trimmed
    "model": "vendor/gpt", "stream": True, "store": False, "tool_choice": "auto", "parallel_tool_calls": True,
    "reasoning": {"summary": "auto"}, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "p1",
    "client_metadata": {"session_id": "s"}, "instructions": None,
    "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "sys"}]},
              {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "say hi"}]},
              {"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}],
    "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}, "strict": False},
              {"type": "namespace", "name": "multi_agent_v1", "description": "agents", "tools": []},
              {"type": "web_search", "external_web_access": False}],
}


async def test_codex_request_is_accepted_and_warns(cfg, gateway_for, upstream) -> None:
    upstream.default = Behaviour(text="hi")
    async with gateway_for(cfg) as gw:
        r = await gw.post("/v1/responses", json=CODEX)
    events = _events(r.text)
    assert r.status_code == 200, r.text
    assert events[-1].type == "response.completed"
    # Each left-out part named with why; none of it called unknown.
    # (reasoning carries no effort here: its summary is honoured, nothing is left out of it)
    assert r.headers["x-switchyard-warning"].split("; ") == [
        "include[0] (reasoning.encrypted_content): encrypted reasoning not produced by this gateway",
        "input[2] (reasoning): reasoning not sent back to the backend",
        "tools[1] (namespace): tool type not translated by this gateway",
        "tools[2] (web_search): hosted tool not run by this gateway"]
    # The answer repeats the tools as Codex sent them, hosted ones too (as OpenAI's does).
    done = events[-1].response
    assert [t.type for t in done.tools] == ["function", "namespace", "web_search"]
    assert done.reasoning is not None and done.reasoning.summary == "auto"
    sent = upstream.requests[0].body
    assert [t["function"]["name"] for t in sent["tools"]] == ["exec_command"]
    assert sent["messages"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "say hi"}]


@pytest.mark.parametrize(("body", "param"), [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"background": True}, "background"),
    ({"input": None}, "input"),
    ({"input": 3}, "input"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": {"a": 1}, "content": "x"}]}, "input[0].role"),  # unhashable: found by the fuzzer
    ({"input": [{"role": "user", "content": [{"type": ["x"], "text": "a"}]}]}, "input[0].content[0].type"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"tools": [{"type": "function"}]}, "tools[0].name"),
    ({"tool_choice": 5}, "tool_choice"),
    # repeated in the answer as sent, so of the types OpenAI's answer holds
    ({"metadata": {"a": 1}}, "metadata"),
    ({"safety_identifier": 5}, "safety_identifier"),
    ({"reasoning": "high"}, "reasoning"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"include": "reasoning.encrypted_content"}, "include"),
    ({"include": [3]}, "include[0]"),
])
async def test_refusals_name_the_field(cfg, gateway_for, body, param) -> None:
    async with gateway_for(cfg) as gw:
        with pytest.raises(openai.BadRequestError) as e:
            await client_for(gw).responses.create(**{"model": "vendor/gpt", "input": "hi", **body})
    assert e.value.status_code == 400 and e.value.param == param, e.value.body


async def test_stored_responses_are_not_there(cfg, gateway_for) -> None:
    async with gateway_for(cfg) as gw:
        with pytest.raises(openai.NotFoundError) as e:
            await client_for(gw).responses.retrieve("resp_123")
        async with httpx.AsyncClient() as bare:  # no key
            anon = await bare.get(str(gw.base_url) + "/v1/responses/resp_123")
    assert "not stored" in str(e.value)
    assert anon.status_code == 401


async def test_upstream_failure_mid_stream(cfg, gateway_for, upstream) -> None:
    upstream.script.append(Behaviour(cut_after=2))
    async with gateway_for(cfg) as gw:
        r = await gw.post("/v1/responses", json={"model": "vendor/gpt", "input": "hi", "stream": True})
    events = _events(r.text)
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    assert events[-1].response.status == "failed" and events[-1].response.error is not None
    assert [e.sequence_number for e in events] == list(range(len(events)))


async def test_response_validates_as_sdk_model(cfg, gateway_for) -> None:
    """What the caller did not send is OpenAI's default in the answer."""
    async with gateway_for(cfg) as gw:
        r = await gw.post("/v1/responses", json={"model": "vendor/gpt", "input": "hi"})
    got = Response.model_validate(r.json())
    assert got.tools == [] and got.tool_choice == "auto" and got.parallel_tool_calls is True
    assert got.metadata == {} and got.instructions is None and got.max_output_tokens is None
    assert got.text is not None and got.text.format is not None and got.text.format.type == "text"


SENT: dict[str, Any] = {  # every field OpenAI's answer repeats, as a caller might send them
    "instructions": "be brief", "metadata": {"run": "7"}, "temperature": 0.25, "top_p": 0.5,
    "max_output_tokens": 2, "tool_choice": {"type": "function", "name": "weather"}, "tools": [WEATHER],
    "parallel_tool_calls": True, "user": "u1", "safety_identifier": "hashed-user",
    "text": {"format": {"type": "json_schema", "name": "thing", "strict": True,
                        "schema": {"type": "object", "properties": {}, "additionalProperties": False}},
             "verbosity": "low"},
    "reasoning": {"effort": "low", "summary": "auto"}}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_answer_repeats_the_request_as_sent(cfg, gateway_for, stream) -> None:
    """instructions, metadata, sampling, tools and the rest, as the caller sent them: in the whole
    answer, and in a stream's response.created and response.completed (read by the SDK)."""
    async with gateway_for(cfg) as gw:
        oa = client_for(gw)
        if stream:
            events = [e async for e in await oa.responses.create(model="vendor/gpt", input="hi",
                                                                  stream=True, **SENT)]
            answers = [events[0].response, events[-1].response]
            assert [events[0].type, events[-1].type] == ["response.created", "response.completed"]
        else:
            raw = await oa.responses.with_raw_response.create(model="vendor/gpt", input="hi", **SENT)
            answers = [Response.model_validate(json.loads(raw.content))]  # validated, not only parsed
    for got in answers:
        dumped = got.model_dump(mode="json", by_alias=True, exclude_unset=True)
        for name, value in SENT.items():
            assert dumped[name] == value, name

