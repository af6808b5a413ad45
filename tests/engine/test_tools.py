"""Tool calling on the engine: validation, the prompt format, the call parser, and required calls
constrained on a tiny model."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from switchyard.core.canonical import CanonicalRequest, Chunk, Constraint
from switchyard.core.errors import InvalidRequest
from switchyard.engine import tools
from tests.engine.conftest import Collector, run

INT = {"type": "integer", "minimum": 0, "maximum": 99}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two numbers",
    "parameters": {"type": "object", "properties": {"a": INT, "b": INT},
                   "required": ["a", "b"]}}}
WEATHER = {"type": "function", "function": {
    "name": "weather", "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                                      "required": ["city"]}}}
TOOLS = [ADD, WEATHER]


def chat(tool_choice=None, tools_=TOOLS, **kw) -> CanonicalRequest:
    kw.setdefault("messages", [{"role": "user", "content": "What is 1 + 2?"}])
    return CanonicalRequest(kind="chat", model="local/tiny", dialect="chat", tools=tools_,
                            tool_choice=tool_choice, **kw)


# --- validation -------------------------------------------------------------------------------

@pytest.mark.parametrize("tools_, choice, param", [
    ([{"type": "function"}], None, "tools[0]"),
    ([ADD, {"type": "retrieval"}], None, "tools[1]"),
    ([{"type": "function", "function": {"name": "f", "parameters": "x"}}], None, "tools[0]"),
    (None, "required", "tool_choice"),
    (TOOLS, "sometimes", "tool_choice"),
    (TOOLS, {"type": "function", "function": {"name": "nope"}}, "tool_choice"),
    (TOOLS, {"type": "function"}, "tool_choice"),
])
def test_bad_tools_name_the_parameter(tools_, choice, param):
    with pytest.raises(InvalidRequest) as e:
        tools.prepare(chat(choice, tools_))
    assert e.value.param == param


def test_choices_resolve_to_plans():
    assert tools.plan(chat()).mode == "auto"
    assert tools.plan(chat("auto")).mode == "auto"
    assert tools.plan(chat("none")) is None
    assert tools.plan(chat(None, None)) is None
    named = tools.plan(chat({"type": "function", "function": {"name": "weather"}}))
    assert named.mode == "required" and [f["name"] for f in named.functions] == ["weather"]
    req, p = tools.prepare(chat("required"))
    assert p.mode == "required" and req.constraint.kind == "lark" and req is not chat("required")
    auto, _ = tools.prepare(chat("auto", constraint=Constraint("json_object")))
    assert auto.constraint == Constraint("json_object")  # auto keeps the caller's own constraint
    with pytest.raises(InvalidRequest) as e:
        tools.prepare(chat("required", constraint=Constraint("json_object")))
    assert e.value.param == "tool_choice"


# --- the prompt -------------------------------------------------------------------------------

def test_messages_render_in_the_hermes_format():
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+2?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "3"}]
    out = tools.render_messages(msgs, tools.plan(chat()))
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"].startswith("Be brief.\n\n") and '"name": "weather"' in out[0]["content"]
    assert out[2]["content"] == '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    assert out[3]["content"] == "<tool_response>\n3\n</tool_response>"
    # what the prompt shows as a call is what the parser reads back
    text, calls = tools.ToolCallParser(frozenset({"add"})).feed(out[2]["content"])
    assert text == "" and calls[0]["function"] == {"name": "add", "arguments": '{"a": 1, "b": 2}'}
    alone = tools.render_messages([{"role": "user", "content": "hi"}], tools.plan(chat()))
    assert alone[0]["role"] == "system" and "<tools>" in alone[0]["content"]
    dev = tools.render_messages([{"role": "developer", "content": "Be brief."}], None)
    assert dev == [{"role": "system", "content": "Be brief."}]


# --- the parser -------------------------------------------------------------------------------

def parse_whole(text: str) -> tuple[str, list[dict]]:
    p = tools.ToolCallParser(frozenset({"add", "weather"}))
    content, calls = p.feed(text)
    return content + p.finish(), calls


RM = '<tool_call>{"name": "rm", "arguments": {}}</tool_call>'
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'


@pytest.mark.parametrize("text, content, names", [
    (CALL, "", ["add"]),
    ("\n" + CALL + "\n" + CALL.replace("add", "weather") + "\n", "", ["add", "weather"]),
    ("Sure. " + CALL, "Sure.", ["add"]),
    ("Sure.\n" + CALL + "\nDone.\n", "Sure.\nDone.", ["add"]),
    ("no call \n", "no call \n", []),
    ('<tool_call>[{"name": "add", "arguments": {}}, {"name": "weather", "arguments": {}}]</tool_call>',
     "", ["add", "weather"]),
    ("plain answer\n", "plain answer\n", []),
    ("a <tool_", "a <tool_", []),  # held back while it might open a call, then given back
    ("<tool_call>{not json</tool_call>", "<tool_call>{not json</tool_call>", []),
    (RM, RM, []),  # a function nobody offered is not a call
    ('x <tool_call>{"name": "add"', 'x <tool_call>{"name": "add"', []),  # cut off: the model's text
])
def test_parser(text, content, names):
    got, calls = parse_whole(text)
    assert got == content
    assert [c["function"]["name"] for c in calls] == names
    assert [c["index"] for c in calls] == list(range(len(names)))
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in calls)
    assert all(isinstance(json.loads(c["function"]["arguments"]), dict) for c in calls)


PIECES = st.sampled_from(["Hi", " ", "\n", "<", "tool", "_call>", "<tool_call>", "</tool_call>", CALL,
                          '{"name": "add", "arguments": {"a": 1}}', "</", "x"])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(PIECES, max_size=8), cuts=st.lists(st.integers(0, 400), max_size=6))
def test_streamed_pieces_parse_like_the_whole(parts, cuts):
    text = "".join(parts)
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    p = tools.ToolCallParser(frozenset({"add", "weather"}))
    content, calls = [], []
    for a, b in itertools.pairwise(bounds):
        t, c = p.feed(text[a:b])
        content.append(t)
        calls += c
    content.append(p.finish())
    whole_text, whole_calls = parse_whole(text)
    assert "".join(content) == whole_text
    assert [c["function"] for c in calls] == [c["function"] for c in whole_calls]


def test_stream_rewrites_chunks_and_finish_reason():
    s = tools.ToolCallStream(tools.plan(chat("required")))
    pieces = [Chunk(text="", role="assistant", tokens=0), Chunk(text="<tool_call>\n", tokens=3),
              Chunk(text=CALL[12:40], tokens=5), Chunk(text=CALL[40:], tokens=4, finish_reason="stop")]
    out = [c for c in (s.rewrite(p) for p in pieces) if c is not None]
    assert out[0].role == "assistant"
    last = out[-1]
    assert last.finish_reason == "tool_calls" and last.text == ""
    assert last.tool_calls[0]["function"]["name"] == "add"
    assert sum(c.tokens for c in out) == 12  # tokens of held-back chunks are carried, not lost
    plain = tools.ToolCallStream(tools.plan(chat()))
    assert plain.rewrite(Chunk(text="4", finish_reason="stop")).finish_reason == "stop"


# --- constrained on a tiny model --------------------------------------------------------------

@pytest.fixture(scope="module")
def roomy_engine(roomy_dir):
    from switchyard.core.deployments import EngineConfig
    from switchyard.engine.loader import load
    from switchyard.engine.scheduler import Engine

    loaded = load(EngineConfig(path=str(roomy_dir), threads=1))
    col = Collector()
    eng = Engine(loaded.model, loaded.tokenizer, col, max_batch=4)
    eng.collector = col
    return eng


def call_of(engine, req: CanonicalRequest) -> tuple[list[dict], str, str]:
    req, p = tools.prepare(req)
    s = tools.ToolCallStream(p)
    chunks = [c for c in (s.rewrite(ch) for ch in run(engine, req)) if c is not None]
    calls = [c for ch in chunks if ch.tool_calls for c in ch.tool_calls]
    return calls, "".join(ch.text for ch in chunks), chunks[-1].finish_reason


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), choice=st.sampled_from(
    ["required", {"type": "function", "function": {"name": "weather"}}]))
def test_required_call_is_always_valid(roomy_engine, seed, choice):
    calls, text, finish = call_of(roomy_engine, chat(choice, seed=seed, temperature=1.0, max_tokens=120))
    assert finish == "tool_calls" and text == "" and len(calls) == 1
    fn = calls[0]["function"]
    args = json.loads(fn["arguments"])
    if fn["name"] == "add":
        assert set(args) == {"a", "b"} and all(isinstance(v, int) and 0 <= v <= 99 for v in args.values())
    else:
        assert fn["name"] == "weather" and list(args) == ["city"] and args["city"] in ("Paris", "Rome")
    if isinstance(choice, dict):
        assert fn["name"] == "weather"


def test_none_renders_no_tools(roomy_engine):
    with_tools = roomy_engine.count_tokens(chat("auto"))
    assert roomy_engine.count_tokens(chat("none")) < with_tools
    assert roomy_engine.count_tokens(chat("none")) == roomy_engine.count_tokens(chat(None, None))
