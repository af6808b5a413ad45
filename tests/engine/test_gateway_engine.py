"""The engine behind the real gateway (HTTP on loopback, tiny model): what real clients send."""

from __future__ import annotations

import json
import re

import openai
import pytest
import pytest_asyncio

from tests.engine.conftest import engine_gateway
from tests.gateway.conftest import openai_sdk

pytestmark = pytest.mark.asyncio(loop_scope="module")

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "blue"]}},
          "required": ["ok", "color"], "additionalProperties": False}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw(roomy_dir):
    async with engine_gateway(str(roomy_dir)) as client:
        yield client


def sse_json(raw: str) -> list[dict]:
    return [json.loads(line[6:]) for line in raw.split("\n") if line.startswith("data: {")]


@pytest.mark.parametrize("path", ["/inference/v1/completions", "/v1/completions"])
@pytest.mark.parametrize("stream", [False, True])
async def test_fireworks_response_format_schema_is_enforced(gw, path, stream):
    body = {"model": "local/m", "prompt": "Hello", "max_tokens": 40, "temperature": 1.0, "stream": stream,
            "response_format": {"type": "json_object", "schema": SCHEMA}}
    for seed in range(3):
        r = await gw.post(path, json={**body, "seed": seed})
        assert r.status_code == 200, r.text
        assert "x-switchyard-warning" not in r.headers
        if stream:
            events = sse_json(r.text)
            text = "".join(c["text"] for e in events for c in e["choices"])
        else:
            text = r.json()["choices"][0]["text"]
        value = json.loads(text)
        assert isinstance(value["ok"], bool) and value["color"] in ("red", "blue")


async def test_chat_content_parts_over_http(gw):
    parts = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]
    ok = await gw.post("/v1/chat/completions", json={
        "model": "local/m", "max_tokens": 3, "messages": [{"role": "user", "content": parts}]})
    assert ok.status_code == 200, ok.text
    bad = await gw.post("/v1/chat/completions", json={"model": "local/m", "messages": [
        {"role": "user", "content": [*parts, {"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}]})
    assert bad.status_code == 400
    err = bad.json()["error"]
    assert err["param"] == "messages[0].content" and "image_url" in err["message"]
    assert "Error" not in err["message"]


# --- tool calling through the official OpenAI SDK ---------------------------------------------

ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two numbers", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9},
                                         "b": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["a", "b"]}}}
NOTE = {"type": "function", "function": {"name": "note", "parameters": {
    "type": "object", "properties": {"text": {"type": "string", "maxLength": 8}}, "required": ["text"]}}}
ASK = [{"role": "user", "content": "What is 2 + 3?"}]
CALL_TEXT = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'


def sdk(gw) -> openai.AsyncOpenAI:
    return openai_sdk(gw, timeout=60)  # the engine on this CPU: slower than an upstream


async def test_required_tool_call_whole(gw):
    r = await sdk(gw).chat.completions.create(model="local/m", messages=ASK, tools=[ADD, NOTE],
                                              tool_choice="required", temperature=1.0, seed=3, max_tokens=100)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    (call,) = c.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    args = json.loads(call.function.arguments)
    assert (call.function.name, sorted(args)) in [("add", ["a", "b"]), ("note", ["text"])]


async def test_named_tool_call_streamed(gw):
    stream = await sdk(gw).chat.completions.create(
        model="local/m", messages=ASK, tools=[ADD, NOTE], stream=True, temperature=1.0, seed=5,
        max_tokens=100, tool_choice={"type": "function", "function": {"name": "note"}})
    chunks = [ch async for ch in stream]
    deltas = [d for ch in chunks for d in (ch.choices[0].delta.tool_calls or [])]
    assert len(deltas) == 1 and deltas[0].index == 0 and deltas[0].id.startswith("call_")
    assert deltas[0].function.name == "note"
    assert list(json.loads(deltas[0].function.arguments)) == ["text"]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not "".join(ch.choices[0].delta.content or "" for ch in chunks)


@pytest.mark.parametrize("stream", [False, True])
async def test_auto_parses_a_call_the_model_writes(gw, stream):
    # guided_regex stands in for a model that chooses to call: it writes exactly this call.
    body = {"model": "local/m", "messages": ASK, "tools": [ADD], "max_tokens": 100, "stream": stream,
            "guided_regex": re.escape(CALL_TEXT)}
    r = await gw.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    if stream:
        choices = [e["choices"][0] for e in sse_json(r.text) if e["choices"]]
        calls = [c for ch in choices for c in ch["delta"].get("tool_calls") or []]
        content = "".join(ch["delta"].get("content") or "" for ch in choices)
        finish = choices[-1]["finish_reason"]
        assert calls[0]["index"] == 0
    else:
        choice = r.json()["choices"][0]
        calls, content, finish = choice["message"]["tool_calls"], choice["message"]["content"] or "", \
            choice["finish_reason"]
        assert "index" not in calls[0]
    assert finish == "tool_calls" and content == ""
    assert [c["function"]["name"] for c in calls] == ["add"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"a": 2, "b": 3}


async def test_tool_results_go_back_to_the_model(gw):
    oa = sdk(gw)
    first = await oa.chat.completions.create(model="local/m", messages=ASK, tools=[ADD],
                                             tool_choice="required", temperature=0, max_tokens=100)
    msg = first.choices[0].message
    history = [*ASK, msg.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "5"}]
    second = await oa.chat.completions.create(model="local/m", messages=history, tools=[ADD], max_tokens=5)
    assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")
    # the call and its result are in the prompt, after the same tools block: it only grew, and
    # the prefix the two share came from the prompt cache
    assert second.usage.prompt_tokens > first.usage.prompt_tokens + 10
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens // 2
    silent = await oa.chat.completions.create(model="local/m", messages=history, tools=[ADD],
                                              tool_choice="none", max_tokens=5)
    assert silent.choices[0].message.tool_calls is None


@pytest.mark.parametrize("extra, param", [
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0]"),
    ({"tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "sub"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
])
async def test_bad_tools_are_400s_naming_them(gw, extra, param):
    with pytest.raises(openai.BadRequestError) as e:
        await sdk(gw).chat.completions.create(model="local/m", messages=ASK, max_tokens=3, **extra)
    assert e.value.body["param"] == param


# --- the Responses API over the engine (read into chat) -------------------------------------------

RESP_ADD = {"type": "function", "name": "add", "description": ADD["function"]["description"],
            "parameters": ADD["function"]["parameters"]}


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_tool_call_on_the_engine(gw, stream):
    oa = sdk(gw)
    kw = {"model": "local/m", "input": [{"role": "user", "content": ASK[0]["content"]}], "tools": [RESP_ADD],
          "tool_choice": "required", "temperature": 1.0, "max_output_tokens": 100}
    if stream:
        async with oa.responses.stream(**kw) as s:
            kinds = [e.type async for e in s]
            r = await s.get_final_response()
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    else:
        r = await oa.responses.create(**kw)
    (call,) = [o for o in r.output if o.type == "function_call"]
    assert call.name == "add" and isinstance(json.loads(call.arguments), dict)
    back = await oa.responses.create(
        model="local/m", tools=[RESP_ADD], max_output_tokens=5, temperature=0,
        input=[*kw["input"], {"type": "function_call", "call_id": call.call_id, "name": "add",
                              "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id, "output": "5"}])
    assert back.status in ("completed", "incomplete") and back.usage is not None
    assert back.usage.output_tokens > 0
