"""The Converse codec: bodies botocore's service model accepts, refusals that name the caller's
field, and ConverseStream events read into canonical chunks (the finish waits for metadata;
exception frames retryable only before any content)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from botocore.loaders import Loader
from botocore.model import ServiceModel
from botocore.validate import ParamValidator

from switchyard.core.canonical import CanonicalRequest, Constraint, Usage
from switchyard.core.errors import InvalidRequest
from switchyard.providers.aws.converse import ConverseCodec
from switchyard.providers.wire import WireError

CODEC = ConverseCodec()
_MODEL = ServiceModel(Loader().load_service_model("bedrock-runtime", "service-2"), "bedrock-runtime")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get",
            "description": "d",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "put"}},
]
HISTORY = [
    {"role": "system", "content": "be brief"},
    {"role": "developer", "content": [{"type": "text", "text": "and kind"}]},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
    },
    {
        "role": "assistant",
        "content": "calling",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"x": "1"}'}},
            {"id": "c2", "type": "function", "function": {"name": "put", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "one"},
    {"role": "tool", "tool_call_id": "c2", "content": "two"},
]


def chat(**kw: Any) -> CanonicalRequest:
    return CanonicalRequest(
        kind="chat",
        model="bedrock/m",
        dialect="openai",
        messages=kw.pop("messages", [{"role": "user", "content": "hi"}]),
        **kw,
    )


def valid(body: dict[str, Any], op: str = "ConverseStream") -> dict[str, Any]:
    """The body, after botocore's service model has accepted it (blobs go as base64 in JSON)."""

    def params(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: base64.b64decode(x) if k == "bytes" else params(x) for k, x in v.items()}
        return [params(x) for x in v] if isinstance(v, list) else v

    report = ParamValidator().validate(
        {"modelId": "m", **params(body)}, _MODEL.operation_model(op).input_shape
    )
    assert not report.has_errors(), report.generate_report()
    return body


def test_full_request_maps_and_validates() -> None:
    body, em = CODEC.render(
        chat(
            messages=HISTORY,
            max_tokens=10,
            temperature=0.2,
            top_p=0.9,
            top_k=4,
            stop=["END"],
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get"}},
            constraint=Constraint("json_schema", {"type": "object"}),  # readers keep the bare schema
            user="alice",
        ),
        "m",
    )
    valid(body)
    assert body["system"] == [{"text": "be brief"}, {"text": "and kind"}]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][0]["content"][1] == {
        "image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}
    }
    assert body["messages"][1]["content"] == [
        {"text": "calling"},
        {"toolUse": {"toolUseId": "c1", "name": "get", "input": {"x": "1"}}},
        {"toolUse": {"toolUseId": "c2", "name": "put", "input": {}}},
    ]
    assert body["messages"][2]["content"] == [
        {"toolResult": {"toolUseId": "c1", "content": [{"text": "one"}]}},
        {"toolResult": {"toolUseId": "c2", "content": [{"text": "two"}]}},
    ]
    assert body["inferenceConfig"] == {
        "maxTokens": 10,
        "temperature": 0.2,
        "topP": 0.9,
        "stopSequences": ["END"],
    }
    assert body["additionalModelRequestFields"] == {"top_k": 4}
    assert body["toolConfig"]["toolChoice"] == {"tool": {"name": "get"}}
    assert body["toolConfig"]["tools"][1] == {
        "toolSpec": {"name": "put", "inputSchema": {"json": {"type": "object", "properties": {}}}}
    }
    fmt = body["outputConfig"]["textFormat"]
    assert fmt["type"] == "json_schema" and json.loads(fmt["structure"]["jsonSchema"]["schema"]) == {
        "type": "object"
    }
    assert em.stop is None


@pytest.mark.parametrize(
    "choice,expected", [("auto", {"auto": {}}), ("required", {"any": {}}), (None, {"auto": {}})]
)
def test_tool_choice(choice: Any, expected: dict[str, Any]) -> None:
    body, _ = CODEC.render(chat(tools=TOOLS, tool_choice=choice), "m")
    assert valid(body)["toolConfig"]["toolChoice"] == expected


def test_tool_choice_none_drops_tools_but_keeps_them_for_a_history_of_calls() -> None:
    body, _ = CODEC.render(chat(tools=TOOLS, tool_choice="none"), "m")
    assert "toolConfig" not in valid(body)
    body, _ = CODEC.render(chat(messages=HISTORY, tools=TOOLS, tool_choice="none"), "m")
    assert "toolChoice" not in valid(body)["toolConfig"] and len(body["toolConfig"]["tools"]) == 2
    with pytest.raises(InvalidRequest) as e:  # a history of calls without the tools: Bedrock would refuse
        CODEC.render(chat(messages=HISTORY), "m")
    assert e.value.param == "tools"


def test_json_object_and_completion_prompt() -> None:
    body, _ = CODEC.render(chat(constraint=Constraint("json_object")), "m")
    assert json.loads(valid(body)["outputConfig"]["textFormat"]["structure"]["jsonSchema"]["schema"]) == {
        "type": "object"
    }
    body, _ = CODEC.render(
        CanonicalRequest(kind="completion", model="b/m", dialect="openai", prompt=["Say hi"]), "m"
    )
    assert valid(body)["messages"] == [{"role": "user", "content": [{"text": "Say hi"}]}]


def test_stop_kept_in_output_is_emulated() -> None:
    body, em = CODEC.render(chat(stop=["x"], include_stop_str_in_output=True), "m")
    assert "inferenceConfig" not in body and em.stop == ["x"] and em.include_stop


@pytest.mark.parametrize(
    "field,value,param",
    [
        ("logprobs", 2, "logprobs"),
        ("seed", 1, "seed"),
        ("presence_penalty", 0.5, "presence_penalty"),
        ("n", 2, "n"),
        ("logit_bias", {1: 1.0}, "logit_bias"),
    ],
)
def test_refusals_name_the_callers_field(field: str, value: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        CODEC.render(chat(**{field: value}), "m")
    assert e.value.param == param and "bedrock" in e.value.message


def test_whole_answer() -> None:
    raw = json.dumps(
        {
            "output": {
                "message": {
                    "role": "assistant",
                    "content": [
                        {"text": "ok"},
                        {"toolUse": {"toolUseId": "t1", "name": "get", "input": {"x": "1"}}},
                    ],
                }
            },
            "stopReason": "tool_use",
            "usage": {
                "inputTokens": 5,
                "outputTokens": 2,
                "totalTokens": 17,
                "cacheReadInputTokens": 4,
                "cacheWriteInputTokens": 6,
            },
            "metrics": {"latencyMs": 1},
        }
    ).encode()
    [c] = CODEC.whole(raw, chat())
    assert c.text == "ok" and c.finish_reason == "tool_calls"
    assert c.tool_calls == [
        {"index": 0, "id": "t1", "type": "function", "function": {"name": "get", "arguments": '{"x":"1"}'}}
    ]
    assert c.usage == Usage(prompt_tokens=15, completion_tokens=2, cached_tokens=4, cache_write_tokens=6)
    raw = json.dumps(
        {
            "output": {"message": {"role": "assistant", "content": []}},
            "stopReason": "guardrail_intervened",
            "usage": {"inputTokens": 1, "outputTokens": 0},
        }
    ).encode()
    assert CODEC.whole(raw, chat())[0].finish_reason == "content_filter"
    with pytest.raises(WireError):
        CODEC.whole(b"{", chat())


def _feed(events: list[tuple[str, Any]]) -> tuple[list[Any], Any]:
    dec = CODEC.stream(chat(stream=True))
    out = []
    for name, payload in events:
        out += dec.feed(name.encode(), json.dumps(payload).encode())
    return out, dec


def test_stream_finish_waits_for_metadata_and_tool_calls_keep_their_index() -> None:
    events = [
        ("messageStart", {"role": "assistant"}),
        ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hi"}}),
        ("contentBlockStop", {"contentBlockIndex": 0}),
        (
            "contentBlockStart",
            {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "a", "name": "f"}}},
        ),
        ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"x":'}}}),
        (
            "contentBlockStart",
            {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "b", "name": "g"}}},
        ),
        ("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": "{}"}}}),
        ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '"1"}'}}}),
        ("messageStop", {"stopReason": "tool_use"}),
    ]
    out, dec = _feed(events)
    assert out[0].role == "assistant" and out[0].text == "Hi"
    assert all(c.finish_reason is None for c in out) and not dec.done
    assert "metadata" in (dec.ending() or "")
    args: dict[int, str] = {}
    for c in out:
        for tc in c.tool_calls or []:
            args[tc["index"]] = args.get(tc["index"], "") + tc["function"]["arguments"]
    assert args == {0: '{"x":"1"}', 1: "{}"}
    last = dec.feed(
        b"metadata",
        json.dumps({"usage": {"inputTokens": 3, "outputTokens": 4, "cacheWriteInputTokens": 2}}).encode(),
    )
    assert last[0].finish_reason == "tool_calls" and dec.done and dec.ending() is None
    assert last[0].usage == Usage(prompt_tokens=5, completion_tokens=4, cache_write_tokens=2)


def test_exceptions_retryable_only_before_content() -> None:
    dec = CODEC.stream(chat(stream=True))
    dec.feed(b"messageStart", b'{"role":"assistant"}')
    with pytest.raises(WireError) as e:
        dec.feed(b"throttlingException", b'{"message":"slow down"}')
    assert e.value.retryable and e.value.said == "slow down"
    _, dec = _feed([("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "x"}})])
    with pytest.raises(WireError) as e:
        dec.feed(b"throttlingException", b'{"message":"slow down"}')
    assert not e.value.retryable and "mid-stream" in e.value.what
    with pytest.raises(WireError) as e:
        CODEC.stream(chat(stream=True)).feed(b"validationException", b'{"message":"bad"}')
    assert not e.value.retryable


def test_user_goes_to_request_metadata_within_its_pattern() -> None:
    body, _ = CODEC.render(chat(user="alice@example.com"), "m")
    assert valid(body)["requestMetadata"] == {"user": "alice@example.com"}
    with pytest.raises(InvalidRequest) as e:
        CODEC.render(chat(user="\u00e9l\u00e8ve"), "m")
    assert e.value.param == "user"


def test_reasoning_is_read_whole_and_streamed_its_signature_and_redactions_are_not() -> None:
    """ReasoningContentBlock (whole) and ReasoningContentBlockDelta (stream), as the service model
    names them: the text is Chunk.reasoning; a signature or redactedContent (bytes, base64 on the
    wire) adds nothing."""
    raw = json.dumps({"output": {"message": {"role": "assistant", "content": [
        {"reasoningContent": {"reasoningText": {"text": "first ", "signature": "sig"}}},
        {"reasoningContent": {"redactedContent": base64.b64encode(b"\x00secret").decode()}},
        {"reasoningContent": {"reasoningText": {"text": "then"}}},
        {"text": "done"}]}}, "stopReason": "end_turn", "usage": {"inputTokens": 1, "outputTokens": 2}},
    ).encode()
    [c] = CODEC.whole(raw, chat())
    assert (c.reasoning, c.text) == ("first then", "done")
    out, _ = _feed([
        ("messageStart", {"role": "assistant"}),
        ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "hm"}}}),
        ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "s"}}}),
        ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"reasoningContent": {
            "redactedContent": base64.b64encode(b"x").decode()}}}),
        ("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"text": "ok"}}),
    ])
    assert [(ch.reasoning, ch.text, ch.role) for ch in out] == [("hm", "", "assistant"), ("", "ok", None)]


@pytest.mark.parametrize(("model", "asked"), [
    ("anthropic.claude-sonnet-4-20250514-v1:0", True),
    ("us.anthropic.claude-3-7-sonnet-20250219-v1:0", True),
    ("arn:aws:bedrock:us-east-1:1:inference-profile/global.anthropic.claude-opus-4-5-20251101-v1:0", True),
    ("anthropic.claude-haiku-4-5-20251001-v1:0", True),
    ("anthropic.claude-3-5-sonnet-20240620-v1:0", False),  # refuses the field
    ("amazon.nova-pro-v1:0", False),
])
def test_claude_thinking_asked_only_with_a_budget_of_claude_that_thinks(model: str, asked: bool) -> None:
    req = chat(max_tokens=4096, top_k=5, show_reasoning=True, reasoning_budget=2048)
    body, _ = CODEC.render(req, model)
    valid(body)
    thinking = {"thinking": {"type": "enabled", "budget_tokens": 2048}} if asked else {}
    assert body["additionalModelRequestFields"] == {"top_k": 5, **thinking}
    # Without a budget (a Responses summary) or without the caller asking: nothing asked.
    for kw in ({"show_reasoning": True}, {"reasoning_budget": 2048}):
        body, _ = CODEC.render(chat(max_tokens=4096, **kw), model)
        assert "additionalModelRequestFields" not in body
