"""Through the gateway's HTTP surface: an OpenAI chat caller -> the gateway -> a Bedrock (Converse,
SigV4, event-stream), Gemini API or Vertex AI deployment played by the SDK-calibrated fakes
(tests/fakes/bedrock.py, tests/fakes/gemini.py). Text, streams, parallel streamed tool calls,
usage with cache, throttling retried to a second deployment, a mid-stream exception, blocked
prompts and safety finishes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes import bedrock as aws
from tests.fakes.bedrock import FakeBedrock
from tests.fakes.bedrock import Reply as AwsReply
from tests.fakes.gemini import API_KEY as GEMINI_KEY
from tests.fakes.gemini import FakeGemini, FakeTokenServer, vertex_dep
from tests.fakes.gemini import Reply as GReply
from tests.gateway.conftest import KEY, base_config
from tests.gateway.helpers import sse_events, sse_objects

BEDROCK_MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
TOOLS = [
    {"type": "function", "function": {"name": "get", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "put", "parameters": {"type": "object", "properties": {}}}},
]
HI = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def bedrock_dep(name: str, url: str, **kw: Any) -> dict[str, Any]:
    return {
        "name": name,
        "backend": "upstream",
        "provider": "bedrock",
        "base_url": url,
        "region": aws.REGION,
        "model": BEDROCK_MODEL,
        "aws_access_key_id": aws.ACCESS_KEY,
        "aws_secret_access_key": aws.SECRET_KEY,
        **kw,
    }


def gemini_dep(url: str, **kw: Any) -> dict[str, Any]:
    return {
        "name": "g",
        "backend": "upstream",
        "provider": "gemini",
        "base_url": url,
        "api_key": GEMINI_KEY,
        "model": "gemini-2.5-flash",
        **kw,
    }


def _deltas(text: str) -> tuple[str, dict[int, dict[str, str]], list[Any], dict[str, Any] | None]:
    """An OpenAI chat stream's text, its tool calls assembled by index, finish reasons, usage."""
    content, calls, finishes, usage = "", {}, [], None
    for obj in sse_objects(text):
        if obj.get("usage"):
            usage = obj["usage"]
        for ch in obj.get("choices") or []:
            d = ch.get("delta") or {}
            content += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                c = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
                c["id"] = tc.get("id") or c["id"]
                fn = tc.get("function") or {}
                c["name"] = fn.get("name") or c["name"]
                c["arguments"] += fn.get("arguments") or ""
            if ch.get("finish_reason"):
                finishes.append(ch["finish_reason"])
    return content, calls, finishes, usage


async def test_bedrock_text_whole_and_streamed_with_cache_usage(gateway_for) -> None:
    async with FakeBedrock() as fake:
        fake.default = AwsReply(
            text="Hi there friend",
            usage={
                "inputTokens": 5,
                "outputTokens": 3,
                "cacheReadInputTokens": 40,
                "cacheWriteInputTokens": 10,
            },
        )
        cfg = base_config([{"name": "aws/claude", "deployments": [bedrock_dep("b1", fake.url)]}])
        async with gateway_for(cfg) as client:
            r = await client.post(
                "/v1/chat/completions",
                json={"model": "aws/claude", "messages": HI, "max_tokens": 20, "temperature": 0.5},
            )
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["choices"][0]["message"]["content"] == "Hi there friend"
            assert body["choices"][0]["finish_reason"] == "stop"
            assert body["usage"]["prompt_tokens"] == 55 and body["usage"]["completion_tokens"] == 3
            assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 40
            seen = fake.requests[-1]
            assert seen.operation == "Converse" and seen.model == BEDROCK_MODEL
            assert seen.body["system"] == [{"text": "be brief"}]
            assert seen.body["inferenceConfig"] == {"maxTokens": 20, "temperature": 0.5}
            assert seen.headers["Authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={aws.ACCESS_KEY}/")

            r = await client.post(
                "/v1/chat/completions",
                json={
                    "model": "aws/claude",
                    "messages": HI,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                },
            )
            assert r.status_code == 200, r.text
            text, calls, finishes, usage = _deltas(r.text)
            assert text == "Hi there friend" and not calls and finishes == ["stop"]
            assert usage is not None and usage["prompt_tokens"] == 55 and usage["completion_tokens"] == 3
            assert sse_events(r.text)[-1] == "[DONE]"
            assert fake.requests[-1].operation == "ConverseStream"


async def test_bedrock_parallel_streamed_tool_calls(gateway_for) -> None:
    async with FakeBedrock() as fake:
        fake.default = AwsReply(text="", tools=[("get", {"city": "Paris"}), ("put", {"k": [1, 2]})])
        cfg = base_config([{"name": "aws/claude", "deployments": [bedrock_dep("b1", fake.url)]}])
        async with gateway_for(cfg) as client:
            r = await client.post(
                "/v1/chat/completions",
                json={
                    "model": "aws/claude",
                    "messages": HI,
                    "tools": TOOLS,
                    "tool_choice": "required",
                    "stream": True,
                },
            )
            assert r.status_code == 200, r.text
            _, calls, finishes, _ = _deltas(r.text)
            assert finishes == ["tool_calls"]
            assert calls == {
                0: {"id": "tooluse_0", "name": "get", "arguments": '{"city": "Paris"}'},
                1: {"id": "tooluse_1", "name": "put", "arguments": '{"k": [1, 2]}'},
            }
            assert fake.requests[-1].body["toolConfig"]["toolChoice"] == {"any": {}}
            # The calls go back as history: toolUse / toolResult blocks the service model accepts.
            history = [
                *HI,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "tooluse_0",
                            "type": "function",
                            "function": {"name": "get", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "tooluse_0", "content": "sunny"},
            ]
            fake.default = AwsReply(text="It is sunny")
            r = await client.post(
                "/v1/chat/completions", json={"model": "aws/claude", "messages": history, "tools": TOOLS}
            )
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "It is sunny"
            assert (
                fake.requests[-1].body["messages"][-1]["content"][0]["toolResult"]["toolUseId"] == "tooluse_0"
            )


@pytest.mark.parametrize(
    "error",
    ["ThrottlingException", "ModelNotReadyException", "ModelErrorException", "ServiceUnavailableException"],
)
async def test_bedrock_throttling_is_retried_on_another_deployment(gateway_for, error: str) -> None:
    async with FakeBedrock() as slow, FakeBedrock() as ok:
        slow.default = AwsReply(error=error)
        cfg = base_config(
            [
                {
                    "name": "aws/claude",
                    "deployments": [
                        bedrock_dep("throttled", slow.url, weight=1000),
                        bedrock_dep("fine", ok.url, weight=0.001),
                    ],
                }
            ]
        )
        async with gateway_for(cfg) as client:
            for stream in (False, True, False):
                r = await client.post(
                    "/v1/chat/completions", json={"model": "aws/claude", "messages": HI, "stream": stream}
                )
                assert r.status_code == 200, r.text
        assert len(ok.requests) == 3 and len(slow.requests) >= 1


async def test_bedrock_throttling_frame_before_content_is_retried(gateway_for) -> None:
    async with FakeBedrock() as first, FakeBedrock() as second:
        first.default = AwsReply(text="a b", exception="throttlingException", exception_after=0)
        cfg = base_config(
            [
                {
                    "name": "aws/claude",
                    "deployments": [
                        bedrock_dep("first", first.url, weight=1000),
                        bedrock_dep("second", second.url, weight=0.001),
                    ],
                }
            ]
        )
        async with gateway_for(cfg) as client:
            r = await client.post(
                "/v1/chat/completions", json={"model": "aws/claude", "messages": HI, "stream": True}
            )
            assert r.status_code == 200, r.text
            text, _, finishes, _ = _deltas(r.text)
            assert text == "Hello from Bedrock" and finishes == ["stop"]


async def test_bedrock_exception_mid_stream_is_an_error_to_the_caller(gateway_for) -> None:
    async with FakeBedrock() as fake:
        fake.default = AwsReply(
            text="one two three four", exception="modelStreamErrorException", exception_after=2
        )
        cfg = base_config([{"name": "aws/claude", "deployments": [bedrock_dep("b1", fake.url)]}])
        async with gateway_for(cfg) as client:
            r = await client.post(
                "/v1/chat/completions", json={"model": "aws/claude", "messages": HI, "stream": True}
            )
            assert r.status_code == 200  # the first chunk went out before the exception came
            text, _, finishes, _ = _deltas(r.text)
            assert text == "one two" and finishes == []
            err = sse_objects(r.text)[-1]["error"]
            assert "modelStreamErrorException" in err["message"] and err["type"] == "upstream_error"


async def test_bedrock_stream_without_metadata_is_no_clean_finish(gateway_for) -> None:
    async with FakeBedrock() as fake:
        fake.default = AwsReply(text="a b", metadata=False)
        cfg = base_config([{"name": "aws/claude", "deployments": [bedrock_dep("b1", fake.url)]}])
        async with gateway_for(cfg) as client:
            r = await client.post(
                "/v1/chat/completions", json={"model": "aws/claude", "messages": HI, "stream": True}
            )
            _, _, finishes, _ = _deltas(r.text)
            assert finishes == [] and "metadata" in sse_objects(r.text)[-1]["error"]["message"]


async def test_bedrock_caller_errors_are_not_retried(gateway_for) -> None:
    async with FakeBedrock() as first, FakeBedrock() as second:
        first.default = second.default = AwsReply(error="ValidationException")
        cfg = base_config(
            [
                {
                    "name": "aws/claude",
                    "deployments": [bedrock_dep("a", first.url), bedrock_dep("b", second.url)],
                }
            ]
        )
        async with gateway_for(cfg) as client:
            r = await client.post("/v1/chat/completions", json={"model": "aws/claude", "messages": HI})
            assert r.status_code == 400 and "ValidationException" in r.json()["error"]["message"], r.text
        assert len(first.requests) + len(second.requests) == 1


async def test_bedrock_wrong_secret_is_a_gateway_worded_502(gateway_for) -> None:
    async with FakeBedrock() as fake:
        cfg = base_config(
            [
                {
                    "name": "aws/claude",
                    "deployments": [bedrock_dep("b1", fake.url, aws_secret_access_key="not-the-secret")],
                }
            ]
        )
        async with gateway_for(cfg) as client:
            r = await client.post("/v1/chat/completions", json={"model": "aws/claude", "messages": HI})
            assert r.status_code == 502 and "credentials" in r.json()["error"]["message"]
            assert "not-the-secret" not in r.text and KEY not in r.text
        assert not fake.requests  # refused before the fake recorded it


async def test_gemini_wrong_key_is_a_gateway_worded_502(gateway_for) -> None:
    # Google answers a wrong key with 400 INVALID_ARGUMENT (reason API_KEY_INVALID): not the caller's fault.
    async with FakeGemini() as fake:
        dep = gemini_dep(fake.url, api_key="AIza-wrong")
        cfg = base_config([{"name": "google/flash", "deployments": [dep]}])
        async with gateway_for(cfg) as client:
            r = await client.post("/v1/chat/completions", json={"model": "google/flash", "messages": HI})
            assert r.status_code == 502, r.text
            assert "refused the gateway's credentials" in r.json()["error"]["message"]
            assert "AIza-wrong" not in r.text and KEY not in r.text


async def test_bedrock_api_key_as_bearer(gateway_for) -> None:
    async with FakeBedrock() as fake:
        dep = {
            "name": "b1",
            "backend": "upstream",
            "provider": "bedrock",
            "base_url": fake.url,
            "region": aws.REGION,
            "model": BEDROCK_MODEL,
            "api_key": aws.API_KEY,
        }
        cfg = base_config([{"name": "aws/claude", "deployments": [dep]}])
        async with gateway_for(cfg) as client:
            r = await client.post("/v1/chat/completions", json={"model": "aws/claude", "messages": HI})
            assert r.status_code == 200, r.text
        assert fake.requests[-1].headers["Authorization"] == f"Bearer {aws.API_KEY}"


async def test_bedrock_refuses_what_converse_cannot_carry(gateway_for) -> None:
    async with FakeBedrock() as fake:
        cfg = base_config([{"name": "aws/claude", "deployments": [bedrock_dep("b1", fake.url)]}])
        async with gateway_for(cfg) as client:
            r = await client.post(
                "/v1/chat/completions",
                json={"model": "aws/claude", "messages": HI, "logprobs": True, "top_logprobs": 2},
            )
            assert r.status_code == 400 and r.json()["error"]["param"] in ("logprobs", "top_logprobs"), r.text
            r = await client.post("/v1/completions", json={"model": "aws/claude", "prompt": "Say hi"})
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["text"] == "Hello from Bedrock"
        assert fake.requests[-1].body["messages"] == [{"role": "user", "content": [{"text": "Say hi"}]}]
        async with gateway_for(cfg) as client:  # n: Converse has one choice per call, the router fans out
            r = await client.post(
                "/v1/chat/completions", json={"model": "aws/claude", "messages": HI, "n": 2}
            )
            assert r.status_code == 200, r.text
            assert [c["index"] for c in r.json()["choices"]] == [0, 1]
        assert all("n" not in q.body for q in fake.requests[-2:])


async def test_gemini_text_tools_and_usage(gateway_for) -> None:
    async with FakeGemini() as fake:
        fake.default = GReply(
            text="Bonjour a tous",
            usage={
                "promptTokenCount": 30,
                "candidatesTokenCount": 3,
                "cachedContentTokenCount": 20,
                "thoughtsTokenCount": 4,
            },
        )
        cfg = base_config([{"name": "google/flash", "deployments": [gemini_dep(fake.url)]}])
        async with gateway_for(cfg) as client:
            r = await client.post(
                "/v1/chat/completions",
                json={"model": "google/flash", "messages": HI, "n": 2, "max_tokens": 9, "seed": 3},
            )
            assert r.status_code == 200, r.text
            body = r.json()
            assert [c["message"]["content"] for c in body["choices"]] == ["Bonjour a tous"] * 2
            assert body["usage"]["prompt_tokens"] == 30 and body["usage"]["completion_tokens"] == 7
            assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 20
            seen = fake.requests[-1]
            assert seen.path == "/v1beta/models/gemini-2.5-flash:generateContent"
            assert seen.headers["x-goog-api-key"] == GEMINI_KEY
            assert seen.body["generationConfig"] == {"maxOutputTokens": 9, "seed": 3, "candidateCount": 2}
            assert seen.body["systemInstruction"] == {"parts": [{"text": "be brief"}]}

            fake.default = GReply(text="", calls=[("get", {"a": 1}), ("put", {})])
            r = await client.post(
                "/v1/chat/completions",
                json={"model": "google/flash", "messages": HI, "tools": TOOLS, "stream": True},
            )
            _, calls, finishes, _ = _deltas(r.text)
            assert finishes == ["tool_calls"]
            assert [(i, c["name"], json.loads(c["arguments"])) for i, c in sorted(calls.items())] == [
                (0, "get", {"a": 1}),
                (1, "put", {}),
            ]
            assert fake.requests[-1].path.endswith(":streamGenerateContent")


async def test_gemini_blocked_prompt_and_safety_finish_are_content_filter(gateway_for) -> None:
    async with FakeGemini() as fake:
        cfg = base_config([{"name": "google/flash", "deployments": [gemini_dep(fake.url)]}])
        async with gateway_for(cfg) as client:
            for stream in (False, True):
                fake.script.append(GReply(block="SAFETY"))
                r = await client.post(
                    "/v1/chat/completions", json={"model": "google/flash", "messages": HI, "stream": stream}
                )
                assert r.status_code == 200, r.text
                if stream:
                    assert _deltas(r.text)[2] == ["content_filter"]
                else:
                    assert r.json()["choices"][0]["finish_reason"] == "content_filter"
                fake.script.append(GReply(text="partial", finish="RECITATION"))
                r = await client.post(
                    "/v1/chat/completions", json={"model": "google/flash", "messages": HI, "stream": stream}
                )
                got = _deltas(r.text)[2] if stream else [r.json()["choices"][0]["finish_reason"]]
                assert got == ["content_filter"], r.text


async def test_gemini_overload_is_retried_and_mid_stream_error_reported(gateway_for) -> None:
    async with FakeGemini() as fake:
        cfg = base_config([{"name": "google/flash", "deployments": [gemini_dep(fake.url)]}])
        async with gateway_for(cfg) as client:
            fake.script.append(GReply(status=503))
            r = await client.post("/v1/chat/completions", json={"model": "google/flash", "messages": HI})
            assert r.status_code == 200 and len(fake.requests) == 2, r.text
            fake.script.append(GReply(text="a b c d", error_after=2))
            r = await client.post(
                "/v1/chat/completions", json={"model": "google/flash", "messages": HI, "stream": True}
            )
            text, _, finishes, _ = _deltas(r.text)
            assert text == "a b" and finishes == []
            assert "mid-stream" in sse_objects(r.text)[-1]["error"]["message"]


async def test_vertex_with_a_service_account_file(gateway_for, tmp_path) -> None:
    async with FakeGemini() as fake:
        with FakeTokenServer(b"", fake.tokens) as tokens:
            dep, info = vertex_dep(tokens, tmp_path, fake.url, "gemini-2.5-pro", location="europe-west4")
            cfg = base_config([{"name": "gcp/pro", "deployments": [dep]}])
            async with gateway_for(cfg) as client:
                for stream in (False, True):
                    r = await client.post(
                        "/v1/chat/completions", json={"model": "gcp/pro", "messages": HI, "stream": stream}
                    )
                    assert r.status_code == 200, r.text
            assert fake.requests[-1].path == (
                "/v1/projects/proj/locations/europe-west4/publishers/google/models/"
                "gemini-2.5-pro:streamGenerateContent"
            )
            assert len(tokens.issued) == 1  # one token, cached for both requests
            assert info["private_key"] not in r.text


async def test_claude_on_vertex_through_raw_predict(gateway_for, tmp_path) -> None:
    from tests.fakes.anthropic import Claude
    from tests.fakes.vertex_claude import FakeVertexClaude

    tokens_ok: set[str] = set()
    async with FakeVertexClaude(tokens_ok) as fake:
        with FakeTokenServer(b"", tokens_ok) as tokens:
            dep, _ = vertex_dep(tokens, tmp_path, fake.url, "claude-sonnet-4-5@20250929", name="vc",
                                   location="us-east5")
            cfg = base_config([{"name": "gcp/claude", "deployments": [dep]}])
            async with gateway_for(cfg) as client:
                fake.inner.script.append(Claude(text="Hi from Vertex", cache_read=30))
                r = await client.post(
                    "/v1/chat/completions", json={"model": "gcp/claude", "messages": HI, "max_tokens": 50}
                )
                assert r.status_code == 200, r.text
                assert r.json()["choices"][0]["message"]["content"] == "Hi from Vertex"
                assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 30
                fake.inner.script.append(Claude(tools=[("get", {"a": 1}), ("put", {})]))
                r = await client.post(
                    "/v1/chat/completions",
                    json={"model": "gcp/claude", "messages": HI, "tools": TOOLS, "stream": True},
                )
                assert r.status_code == 200, r.text
                _, calls, finishes, _ = _deltas(r.text)
                assert finishes == ["tool_calls"] and [c["name"] for _, c in sorted(calls.items())] == [
                    "get",
                    "put",
                ]
            seen = fake.requests[-1]
            assert seen.path.endswith(
                "/publishers/anthropic/models/claude-sonnet-4-5%4020250929:streamRawPredict"
            ) or seen.path.endswith(
                "/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
            )
            assert seen.body["anthropic_version"] == "vertex-2023-10-16" and "model" not in seen.body
            assert len(tokens.issued) == 1


def test_without_the_cloud_extras(monkeypatch) -> None:
    """A proxy-only install: static Bedrock keys and Gemini need neither botocore nor google-auth;
    the AWS chain and Vertex name the extra to install."""
    import sys

    import pytest

    from switchyard.core.deployments import DeploymentConfig
    from switchyard.core.settings import ConfigError
    from switchyard.providers.rows import wire_for

    class Block:
        def find_spec(self, name: str, path: object = None, target: object = None) -> None:
            if name.split(".")[0] in ("botocore", "google"):
                raise ImportError(f"blocked {name}")

    for name in [m for m in sys.modules if m.split(".")[0] in ("botocore", "google")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [Block(), *sys.meta_path])

    def dep(**kw: object) -> DeploymentConfig:
        return DeploymentConfig.model_validate({"name": "d", **kw})

    static = dep(provider="bedrock", region="us-east-1", aws_access_key_id="a", aws_secret_access_key="s")
    assert [k for k, _ in wire_for(static).auth(static).sign("POST", "/model/m/converse", "h", b"{}")] == [
        "x-amz-date",
        "authorization",
    ]
    gem = dep(provider="gemini", api_key="k")
    assert wire_for(gem).auth(gem).fixed == {"x-goog-api-key": "k"}
    for d, extra in (
        (dep(provider="bedrock", region="us-east-1"), "bedrock"),
        (dep(provider="vertex", project="p"), "vertex"),
    ):
        with pytest.raises(ConfigError, match=rf"switchyard-gateway\[{extra}\]"):
            wire_for(d).auth(d)
