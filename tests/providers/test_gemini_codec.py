"""The generateContent codec: bodies google-genai's models accept, answers and alt=sse events read
into canonical chunks (safety finishes and blocked prompts as content_filter, usage in OpenAI's
meaning), and Vertex's OAuth token fetched from a service account through google-auth, cached and
refreshed before it expires."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from google.genai import types

from switchyard.core.canonical import CanonicalRequest, Constraint, Usage
from switchyard.core.errors import InvalidRequest, UpstreamError
from switchyard.providers.google.answers import FINISH
from switchyard.providers.google.gemini import GeminiCodec
from switchyard.providers.wire import WireError
from tests.fakes.gemini import FakeTokenServer, check_request, service_account

CODEC = GeminiCodec()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get",
            "description": "d",
            "parameters": {
                "type": "object",
                "properties": {"x": {"type": "string"}},
                "additionalProperties": False,
            },
        },
    }
]
HISTORY = [
    {"role": "system", "content": "be brief"},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"x": "1"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 20}'},
    {"role": "tool", "tool_call_id": "c1", "content": "plain"},
]


def chat(**kw: Any) -> CanonicalRequest:
    return CanonicalRequest(
        kind="chat",
        model="gemini/m",
        dialect="openai",
        messages=kw.pop("messages", [{"role": "user", "content": "hi"}]),
        **kw,
    )


def valid(body: dict[str, Any]) -> dict[str, Any]:
    problem = check_request(body)
    assert problem is None, problem
    return body


def test_full_request_maps_and_validates() -> None:
    body, em = CODEC.render(
        chat(
            messages=HISTORY,
            max_tokens=9,
            temperature=0.1,
            top_p=0.8,
            top_k=3,
            seed=7,
            presence_penalty=0.5,
            frequency_penalty=0.25,
            n=2,
            logprobs=3,
            stop=["END"],
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get"}},
            constraint=Constraint("json_schema", {"type": "object"}),  # readers keep the bare schema
        ),
        "m",
    )
    valid(body)
    assert body["systemInstruction"] == {"parts": [{"text": "be brief"}]}
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert body["contents"][0]["parts"][1] == {
        "inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}
    }
    assert body["contents"][1]["parts"] == [{"functionCall": {"name": "get", "args": {"x": "1"}}}]
    assert body["contents"][2]["parts"] == [
        {"functionResponse": {"name": "get", "response": {"temp": 20}}},
        {"functionResponse": {"name": "get", "response": {"content": "plain"}}},
    ]
    assert body["generationConfig"] == {
        "maxOutputTokens": 9,
        "temperature": 0.1,
        "topP": 0.8,
        "topK": 3,
        "seed": 7,
        "presencePenalty": 0.5,
        "frequencyPenalty": 0.25,
        "candidateCount": 2,
        "stopSequences": ["END"],
        "responseLogprobs": True,
        "logprobs": 3,
        "responseMimeType": "application/json",
        "responseJsonSchema": {"type": "object"},
    }
    assert (
        body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"]["additionalProperties"] is False
    )
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get"]}}
    assert em.stop is None


@pytest.mark.parametrize("choice,mode", [("auto", "AUTO"), ("required", "ANY"), ("none", "NONE")])
def test_tool_choice(choice: str, mode: str) -> None:
    body, _ = CODEC.render(chat(tools=TOOLS, tool_choice=choice), "m")
    assert valid(body)["toolConfig"] == {"functionCallingConfig": {"mode": mode}}


def test_json_object_and_refusals() -> None:
    body, _ = CODEC.render(chat(constraint=Constraint("json_object")), "m")
    assert valid(body)["generationConfig"] == {"responseMimeType": "application/json"}
    refused: list[tuple[str, Any, str]] = [
        ("logit_bias", {1: 1.0}, "logit_bias"),
        ("min_p", 0.1, "min_p"),
        ("constraint", Constraint("regex", "a+"), "guided_regex"),
    ]
    for field, value, param in refused:
        with pytest.raises(InvalidRequest) as e:  # a vLLM-dialect caller: its own field names
            CODEC.render(
                CanonicalRequest(
                    kind="chat",
                    model="gemini/m",
                    dialect="vllm",
                    messages=[{"role": "user", "content": "hi"}],
                    **{field: value},
                ),
                "m",
            )
        assert e.value.param == param and "gemini" in e.value.message
    with pytest.raises(InvalidRequest) as e:
        CODEC.render(
            chat(
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
                        ],
                    }
                ]
            ),
            "m",
        )
    assert e.value.param == "messages[0].content[0].image_url.url"


def test_every_finish_reason_is_mapped_and_safety_is_content_filter() -> None:
    assert set(FINISH) >= {r.value for r in types.FinishReason}
    for r in (
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "MODEL_ARMOR",
    ):
        assert FINISH[r] == "content_filter"
    assert FINISH["STOP"] == "stop" and FINISH["MAX_TOKENS"] == "length"
    assert FINISH["MALFORMED_FUNCTION_CALL"] == "error" and FINISH["OTHER"] == "error"


def _answer(**kw: Any) -> bytes:
    obj = {
        "candidates": [
            {
                "index": 0,
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "thinking...", "thought": True},
                        {"text": "ok"},
                        {"functionCall": {"name": "get", "args": {"x": "1"}}},
                    ],
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 10,
            "candidatesTokenCount": 3,
            "cachedContentTokenCount": 6,
            "thoughtsTokenCount": 5,
            "totalTokenCount": 18,
        },
        **kw,
    }
    types.GenerateContentResponse.model_validate(obj)
    return json.dumps(obj).encode()


def test_whole_answer() -> None:
    [c] = CODEC.whole(_answer(), chat())
    assert c.text == "ok" and c.finish_reason == "tool_calls"
    assert c.reasoning == "thinking..."  # a thought part: shown only to callers who asked
    assert c.tool_calls == [
        {
            "index": 0,
            "id": "call_0_0",
            "type": "function",
            "function": {"name": "get", "arguments": '{"x":"1"}'},
        }
    ]
    assert c.usage == Usage(prompt_tokens=10, completion_tokens=8, cached_tokens=6, reasoning_tokens=5)


def test_blocked_prompt_is_a_content_filter_answer() -> None:
    raw = json.dumps(
        {
            "promptFeedback": {"blockReason": "SAFETY"},
            "usageMetadata": {"promptTokenCount": 4, "totalTokenCount": 4},
        }
    ).encode()
    [c] = CODEC.whole(raw, chat())
    assert c.finish_reason == "content_filter" and c.text == "" and c.usage == Usage(prompt_tokens=4)
    dec = CODEC.stream(chat(stream=True))
    [c] = dec.feed(None, raw)
    assert c.finish_reason == "content_filter" and dec.ending() is None
    with pytest.raises(WireError):
        CODEC.whole(b'{"candidates": []}', chat())


def test_stream_of_two_candidates() -> None:
    dec = CODEC.stream(chat(stream=True, n=2))
    ev: dict[str, Any] = {
        "candidates": [
            {"index": 0, "content": {"role": "model", "parts": [{"text": "a"}]}},
            {"index": 1, "content": {"role": "model", "parts": [{"text": "b"}]}},
        ]
    }
    first = dec.feed(None, json.dumps(ev).encode())
    assert [(c.index, c.text, c.role) for c in first] == [(0, "a", "assistant"), (1, "b", "assistant")]
    ev = {
        "candidates": [
            {"index": 0, "content": {"role": "model", "parts": [{"text": "!"}]}, "finishReason": "STOP"}
        ]
    }
    assert dec.feed(None, json.dumps(ev).encode())[0].usage is None
    assert dec.ending() == "ended the stream before every candidate finished"
    ev = {
        "candidates": [
            {
                "index": 1,
                "content": {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
                "finishReason": "SAFETY",
            }
        ],
        "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 4, "totalTokenCount": 6},
    }
    [last] = dec.feed(None, json.dumps(ev).encode())
    assert last.finish_reason == "content_filter" and last.tool_calls and last.tool_calls[0]["index"] == 0
    assert last.usage == Usage(prompt_tokens=2, completion_tokens=4) and dec.ending() is None


def test_stream_errors_retryable_only_before_content() -> None:
    err = json.dumps({"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}).encode()
    with pytest.raises(WireError) as e:
        CODEC.stream(chat(stream=True)).feed(None, err)
    assert e.value.retryable and e.value.said == "overloaded"
    dec = CODEC.stream(chat(stream=True))
    dec.feed(None, b'{"candidates":[{"index":0,"content":{"role":"model","parts":[{"text":"a"}]}}]}')
    with pytest.raises(WireError) as e:
        dec.feed(None, err)
    assert not e.value.retryable and "mid-stream" in e.value.what
    assert CODEC.stream(chat(stream=True)).ending() == "sent a stream without any candidate"


async def test_vertex_token_from_a_service_account_cached_and_refreshed_early(tmp_path: Any) -> None:
    """The token is fetched by the refresher's task (on a worker thread), cached, and fetched
    again ahead of its expiry while the old one still goes out."""
    import google.auth.transport.requests
    from google.oauth2 import service_account as sa

    from switchyard.providers.google.vertex import EARLY, SCOPE, GoogleAuth

    accepted: set[str] = set()
    with FakeTokenServer(b"", accepted, lifetime=int(EARLY) + 1) as server:  # due again in ~1 s
        info, public = service_account(server.url)
        server.public_pem = public
        auth = GoogleAuth("v1", sa.Credentials.from_service_account_info(info, scopes=[SCOPE]),
                          google.auth.transport.requests.Request)
        assert auth.refresher is not None
        try:
            token = await auth.refresher.ready(10)
            [(name, value)] = auth.sign("POST", "/x", "h", b"")
            assert name == "authorization" and value == f"Bearer {token}" and token in accepted
            assert auth.sign("POST", "/x", "h", b"") == [(name, value)] and len(server.issued) == 1
            for _ in range(100):  # the early refresh, with nobody asking
                if len(server.issued) == 2 and auth.refresher.value != token:
                    break
                await asyncio.sleep(0.1)
            fresh = auth.sign("POST", "/x", "h", b"")
            assert len(server.issued) == 2 and fresh != [(name, value)] and fresh[0][1][7:] in accepted
        finally:
            await auth.refresher.aclose()
    info["token_uri"] = "http://127.0.0.1:9/token"  # nobody listens: a clear, retryable 502, no secret
    auth = GoogleAuth("v2", sa.Credentials.from_service_account_info(info, scopes=[SCOPE]),
                      google.auth.transport.requests.Request)
    try:
        with pytest.raises(UpstreamError) as e:
            await auth.refresher.ready(10)
    finally:
        await auth.refresher.aclose()
    assert e.value.status == 502 and e.value.retryable and "OAuth token" in e.value.message
    assert "v2" in e.value.message and "PRIVATE KEY" not in e.value.message


def test_stream_thought_parts_are_reasoning() -> None:
    """An event of thought parts alone (includeThoughts) is a chunk of reasoning, not skipped."""
    dec = CODEC.stream(chat(stream=True))
    ev = {"candidates": [{"index": 0, "content": {"role": "model", "parts": [
        {"text": "hmm", "thought": True}]}}]}
    types.GenerateContentResponse.model_validate(ev)
    [c] = dec.feed(None, json.dumps(ev).encode())
    assert (c.reasoning, c.text, c.role) == ("hmm", "", "assistant")
    ev = {"candidates": [{"index": 0, "content": {"role": "model", "parts": [{"text": "ok"}]},
                          "finishReason": "STOP"}]}
    [c] = dec.feed(None, json.dumps(ev).encode())
    assert (c.reasoning, c.text) == ("", "ok")
