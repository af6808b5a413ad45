"""The Anthropic codec alone: request bodies (checked against the anthropic SDK's own request
type), answers and stream events (checked with its models where the SDK has one)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pydantic
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

from switchyard.core.canonical import CanonicalRequest, Constraint, Native
from switchyard.core.deployments import DeploymentConfig
from switchyard.core.errors import InvalidRequest
from switchyard.providers.anthropic import CODEC
from switchyard.providers.wire import WireError
from tests.fakes.anthropic import _consume

DEP = DeploymentConfig(name="d", provider="anthropic", api_key="k")
_REQUEST = pydantic.TypeAdapter(MessageCreateParamsNonStreaming)
_EVENT = pydantic.TypeAdapter(RawMessageStreamEvent)


def chat(messages: list[dict[str, Any]], **kw: Any) -> CanonicalRequest:
    return CanonicalRequest(kind="chat", model="anthropic/claude", dialect="openai", messages=messages, **kw)


def render(req: CanonicalRequest) -> dict[str, Any]:
    body, _ = CODEC.render(req, "claude-up", DEP)
    _consume(_REQUEST.validate_python({k: v for k, v in body.items() if k != "stream"}))
    return body


def test_system_blocks_images_and_merged_turns() -> None:
    body = render(
        chat(
            [
                {"role": "system", "content": "a"},
                {"role": "developer", "content": "b"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                    ],
                },
                {"role": "user", "content": "and"},
            ]
        )
    )
    assert body["system"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
                {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                {"type": "text", "text": "and"},
            ],
        }
    ]


def test_json_object_tool_choice_none_and_kept_stop_strings() -> None:
    req = chat(
        [{"role": "user", "content": "x"}],
        constraint=Constraint("json_object"),
        tool_choice="none",
        tools=[{"type": "function", "function": {"name": "f"}}],
        stop=["END"],
        include_stop_str_in_output=True,
        max_tokens=-1,
    )
    body, em = CODEC.render(req, "m", DEP)
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": {"type": "object"}}}
    assert body["tool_choice"] == {"type": "none"} and body["max_tokens"] == 4096
    assert "stop_sequences" not in body and em.stop == ["END"] and em.include_stop  # the gateway stops


@pytest.mark.parametrize(
    ("field", "value"),
    [("presence_penalty", 0.5), ("logit_bias", {1: 1.0}), ("logprobs", 0), ("min_p", 0.1), ("images", ["x"])],
)
def test_what_the_api_lacks_is_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(InvalidRequest) as e:
        CODEC.render(replace(chat([{"role": "user", "content": "x"}]), **{field: value}), "m", DEP)
    assert e.value.param is not None and "Anthropic" in e.value.message


def test_regex_constraints_and_token_prompts_are_refused() -> None:
    with pytest.raises(InvalidRequest) as e:
        CODEC.render(chat([{"role": "user", "content": "x"}], constraint=Constraint("regex", "a+")), "m", DEP)
    assert "regex" in e.value.message
    with pytest.raises(InvalidRequest) as e:
        CODEC.render(
            CanonicalRequest(kind="completion", model="m", dialect="openai", prompt=[[1, 2]]), "m", DEP
        )
    assert e.value.param == "prompt"


def test_whole_answer_thinking_ignored_and_unknown_stop_reason_is_stop() -> None:
    msg = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "c",
        "stop_reason": "pause_turn",
        "stop_sequence": None,
        "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "text", "text": "ok"}],
        "usage": {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 3},
    }
    Message.model_validate(msg)
    (ch,) = CODEC.whole(json.dumps(msg).encode(), chat([]))
    assert ch.text == "ok" and ch.finish_reason == "stop"
    assert (ch.usage.prompt_tokens, ch.usage.cached_tokens) == (8, 3)  # type: ignore[union-attr]
    err = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    with pytest.raises(WireError) as e:
        CODEC.whole(json.dumps(err).encode(), chat([]))
    assert e.value.retryable


def _feed(events: list[dict[str, Any]]) -> tuple[Any, list[Any]]:
    dec = CODEC.stream(chat([]))
    out = []
    for ev in events:
        if ev["type"] not in ("ping", "error"):
            _EVENT.validate_python(ev)
        out += dec.feed(ev["type"].encode(), json.dumps(ev).encode())
    return dec, out


START = {
    "type": "message_start",
    "message": {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "c",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 4},
    },
}


def test_stream_usage_is_input_from_start_plus_cumulative_output() -> None:
    dec, out = _feed(
        [
            START,
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            },
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "x"}},
            {"type": "content_block_stop", "index": 0},
            {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "hi"}},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                "usage": {"output_tokens": 7},
            },
            {"type": "message_stop"},
        ]
    )
    assert [c.text for c in out] == ["hi", ""] and out[0].role == "assistant"
    assert out[-1].finish_reason == "length"
    u = out[-1].usage
    assert (u.prompt_tokens, u.cache_write_tokens, u.completion_tokens) == (14, 4, 7)
    assert dec.done and dec.ending() is None


def test_a_stream_without_its_finish_is_no_success() -> None:
    dec, _ = _feed(
        [START, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}]
    )
    assert dec.ending() == "ended the stream before it finished"
    dec, _ = _feed([])
    assert dec.ending() == "sent a stream without any event"
    with pytest.raises(WireError) as e:
        _feed([START, {"type": "error", "error": {"type": "invalid_request_error", "message": "no"}}])
    assert not e.value.retryable  # only overload-like errors go elsewhere


@pytest.mark.parametrize("event", [
    {"type": "content_block_delta", "index": 0, "delta": "hi"},
    {"type": "message_delta", "delta": ["end_turn"], "usage": {"output_tokens": 1}},
    {"type": "content_block_delta", "index": [0],
     "delta": {"type": "input_json_delta", "partial_json": "{}"}},  # an index that is not a number
    ["content_block_delta"],
])
def test_an_event_of_the_wrong_shape_is_a_malformed_event(event: Any) -> None:
    """An event, its delta or its index of the wrong shape is the upstream's fault, said so."""
    dec = CODEC.stream(chat([]))
    dec.feed(b"message_start", json.dumps(START).encode())
    with pytest.raises(WireError, match="malformed stream event"):
        dec.feed(b"x", json.dumps(event).encode())


def test_the_native_lane_relays_thinking_deltas_as_sent_and_stop_sequences() -> None:
    native = replace(chat([]), native=Native("anthropic", {}, {}, ()))
    dec = CODEC.stream(native)
    thought = {"type": "thinking_delta", "thinking": "Let me see."}
    signed = {"type": "signature_delta", "signature": "EqQBsig=="}
    out: list[Any] = []
    for ev in [START, {"type": "content_block_start", "index": 0,
                       "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
               {"type": "content_block_delta", "index": 0, "delta": thought},
               {"type": "content_block_delta", "index": 0, "delta": signed},
               {"type": "message_delta", "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END"},
                "usage": {"output_tokens": 3}}]:
        _EVENT.validate_python(ev)
        out += dec.feed(None, json.dumps(ev).encode())
    assert [c.thinking for c in out[:3]] == [[{"type": "thinking", "thinking": "", "signature": ""}],
                                             [thought], [signed]]
    assert out[-1].finish_reason == "stop" and out[-1].stop_word == "END"


def test_one_body_in_the_bedrock_and_vertex_envelopes() -> None:
    from switchyard.providers.anthropic import AnthropicCodec

    req = chat([{"role": "user", "content": "x"}], stream=True)
    bedrock = AnthropicCodec(model_field=False, stream_field=False,
                             envelope={"anthropic_version": "bedrock-2023-05-31"})
    body, _ = bedrock.render(req, "anthropic.claude-3-5-sonnet-20240620-v1:0", DEP)
    assert "model" not in body and "stream" not in body and body["anthropic_version"] == "bedrock-2023-05-31"
    vertex = AnthropicCodec(model_field=False, envelope={"anthropic_version": "vertex-2023-10-16"})
    body, _ = vertex.render(req, "claude-x", DEP)
    assert "model" not in body and body["stream"] is True and body["messages"]
    native = vertex.native({"model": "c", "max_tokens": 5, "messages": []}, req, "claude-x")
    assert "model" not in native and native["anthropic_version"] == "vertex-2023-10-16"
