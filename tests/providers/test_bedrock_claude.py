"""Claude on Bedrock InvokeModel (``api: invoke``): the fake (tests/fakes/bedrock_claude.py)
calibrated with the anthropic SDK's ``AnthropicBedrock`` client and boto3's invoke_model /
invoke_model_with_response_stream, then an OpenAI chat caller -> the gateway -> the fake: text with
cache usage, a stream with parallel tool calls, throttling retried, a mid-stream exception, betas."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from typing import Any

import boto3
import msgspec
import pytest
from anthropic.lib.bedrock import AnthropicBedrock
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError

from tests.fakes import bedrock as aws
from tests.fakes.anthropic import Claude, FakeAnthropic
from tests.fakes.bedrock_claude import VERSIONS, FakeBedrockClaude, Invoke
from tests.gateway.conftest import base_config
from tests.gateway.helpers import sse_objects
from tests.providers.test_cloud_gateway import HI, TOOLS, _deltas

ASK = {"model": "aws/claude", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


def _sdk(url: str) -> AnthropicBedrock:
    return AnthropicBedrock(aws_access_key=aws.ACCESS_KEY, aws_secret_key=aws.SECRET_KEY,
                            aws_region=aws.REGION, base_url=url, max_retries=0)


def _boto(url: str) -> Any:
    return boto3.client("bedrock-runtime", region_name=aws.REGION, endpoint_url=url,
                        aws_access_key_id=aws.ACCESS_KEY, aws_secret_access_key=aws.SECRET_KEY,
                        config=Config(retries={"total_max_attempts": 1}))


def dep(name: str, url: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "backend": "upstream", "provider": "bedrock", "api": "invoke", "base_url": url,
            "region": aws.REGION, "model": MODEL, "aws_access_key_id": aws.ACCESS_KEY,
            "aws_secret_access_key": aws.SECRET_KEY, **kw}


# -- calibration ----------------------------------------------------------------------------------


async def test_the_anthropic_bedrock_sdk_is_served() -> None:
    async with FakeBedrockClaude() as fake:
        with _sdk(fake.url) as sdk:
            fake.inner.script.append(Claude(text="Hi from Bedrock", cache_read=12))
            msg = await asyncio.to_thread(lambda: sdk.messages.create(
                model=MODEL, max_tokens=20, messages=[{"role": "user", "content": "hi"}]))
            assert msg.content[0].text == "Hi from Bedrock"  # type: ignore[union-attr]
            assert msg.usage.cache_read_input_tokens == 12
            seen = fake.requests[-1]
            assert seen.operation == "InvokeModel" and seen.model == MODEL
            assert seen.body["anthropic_version"] in VERSIONS and "model" not in seen.body

            fake.inner.script.append(Claude(tools=[("get", {"a": 1}), ("put", {})]))

            def streamed() -> list[Any]:
                with sdk.messages.stream(model=MODEL, max_tokens=20,
                                         messages=[{"role": "user", "content": "hi"}]) as s:
                    list(s)
                    return list(s.get_final_message().content)

            blocks = await asyncio.to_thread(streamed)
            assert [b.name for b in blocks if b.type == "tool_use"] == ["get", "put"]
            assert fake.requests[-1].operation == "InvokeModelWithResponseStream"
            assert "stream" not in fake.requests[-1].body


async def test_boto3_invoke_model_and_errors() -> None:
    async with FakeBedrockClaude() as fake:
        with contextlib.closing(_boto(fake.url)) as bt:
            body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 10,
                               "messages": [{"role": "user", "content": "hi"}]})
            out = await asyncio.to_thread(lambda: bt.invoke_model(modelId=MODEL, body=body))
            assert json.loads(out["body"].read())["content"][0]["text"] == "Hello from Claude"

            def events() -> list[dict[str, Any]]:
                r = bt.invoke_model_with_response_stream(modelId=MODEL, body=body)
                with contextlib.closing(r["body"]) as stream:  # its connection too, when the stream fails
                    return [json.loads(e["chunk"]["bytes"]) for e in stream]

            types = [e["type"] for e in await asyncio.to_thread(events)]
            assert types[0] == "message_start" and types[-1] == "message_stop"

            fake.script.append(Invoke(error="ThrottlingException"))
            with pytest.raises(ClientError) as e:
                await asyncio.to_thread(lambda: bt.invoke_model(modelId=MODEL, body=body))
            assert e.value.response["Error"]["Code"] == "ThrottlingException"
            fake.script.append(Invoke(exception="modelStreamErrorException", exception_after=2))
            with pytest.raises(EventStreamError) as s:
                await asyncio.to_thread(events)
            assert s.value.response["Error"]["Code"] == "modelStreamErrorException"
            # What Bedrock refuses, the fake refuses: a model field, and a wrong version.
            bad = json.dumps({"model": MODEL, **json.loads(body)})
            with pytest.raises(ClientError) as e:
                await asyncio.to_thread(lambda: bt.invoke_model(modelId=MODEL, body=bad))
            assert e.value.response["Error"]["Code"] == "ValidationException"


# -- through the gateway ----------------------------------------------------------------------------


async def test_text_with_cache_usage_whole_and_streamed(gateway_for) -> None:
    async with FakeBedrockClaude() as fake:
        cfg = base_config([{"name": "aws/claude", "deployments": [dep("b1", fake.url)]}])
        async with gateway_for(cfg) as client:
            fake.inner.script.append(Claude(text="Hi there friend", cache_read=40, cache_write=10))
            r = await client.post("/v1/chat/completions",
                                  json={"model": "aws/claude", "messages": HI, "max_tokens": 20})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["choices"][0]["message"]["content"] == "Hi there friend"
            usage = body["usage"]
            assert usage["prompt_tokens_details"]["cached_tokens"] == 40
            assert usage["prompt_tokens"] > 50  # input + cache reads (40) + cache writes (10)
            assert usage["completion_tokens"] == 3  # the fake's one token per word
            seen = fake.requests[-1]
            assert seen.operation == "InvokeModel" and seen.model == MODEL
            assert seen.body["anthropic_version"] == "bedrock-2023-05-31"
            assert "model" not in seen.body and "stream" not in seen.body
            assert seen.body["system"] == "be brief"
            assert seen.headers["Authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={aws.ACCESS_KEY}/")

            fake.inner.script.append(Claude(text="Hi there friend", cache_read=40))
            r = await client.post("/v1/chat/completions", json={
                "model": "aws/claude", "messages": HI, "stream": True,
                "stream_options": {"include_usage": True}})
            assert r.status_code == 200, r.text
            text, calls, finishes, su = _deltas(r.text)
            assert text == "Hi there friend" and not calls and finishes == ["stop"]
            assert su is not None and su["prompt_tokens_details"]["cached_tokens"] == 40
            assert fake.requests[-1].operation == "InvokeModelWithResponseStream"


async def test_stream_with_parallel_tool_calls(gateway_for) -> None:
    async with FakeBedrockClaude() as fake:
        cfg = base_config([{"name": "aws/claude", "deployments": [dep("b1", fake.url)]}])
        async with gateway_for(cfg) as client:
            fake.inner.script.append(Claude(text="", tools=[("get", {"city": "Paris"}), ("put", {"k": [1]})]))
            r = await client.post("/v1/chat/completions", json={
                "model": "aws/claude", "messages": HI, "tools": TOOLS, "tool_choice": "required",
                "stream": True})
            assert r.status_code == 200, r.text
            _, calls, finishes, _ = _deltas(r.text)
            assert finishes == ["tool_calls"]
            assert [c["name"] for _, c in sorted(calls.items())] == ["get", "put"]
            assert [json.loads(c["arguments"]) for _, c in sorted(calls.items())] == [{"city": "Paris"},
                                                                                      {"k": [1]}]
            assert len({c["id"] for c in calls.values()}) == 2
            assert fake.requests[-1].body["tool_choice"] == {"type": "any"}


@pytest.mark.parametrize("stream", [False, True])
async def test_throttling_is_retried_on_another_deployment(gateway_for, stream: bool) -> None:
    async with FakeBedrockClaude() as slow, FakeBedrockClaude() as ok:
        slow.script.append(Invoke(error="ThrottlingException"))
        cfg = base_config([{"name": "aws/claude", "deployments": [
            dep("throttled", slow.url, weight=1000), dep("fine", ok.url, weight=0.001)]}])
        async with gateway_for(cfg) as client:
            r = await client.post("/v1/chat/completions",
                                  json={"model": "aws/claude", "messages": HI, "stream": stream})
            assert r.status_code == 200, r.text
        assert len(ok.requests) == 1 and len(slow.requests) == 1


async def test_throttling_frame_before_content_is_retried(gateway_for) -> None:
    async with FakeBedrockClaude() as first, FakeBedrockClaude() as second:
        first.script.append(Invoke(exception="throttlingException", exception_after=0))
        cfg = base_config([{"name": "aws/claude", "deployments": [
            dep("first", first.url, weight=1000), dep("second", second.url, weight=0.001)]}])
        async with gateway_for(cfg) as client:
            r = await client.post("/v1/chat/completions",
                                  json={"model": "aws/claude", "messages": HI, "stream": True})
            assert r.status_code == 200, r.text
            text, _, finishes, _ = _deltas(r.text)
            assert text == "Hello from Claude" and finishes == ["stop"]
        assert len(first.requests) == 1 and len(second.requests) == 1


async def test_exception_mid_stream_is_an_error_to_the_caller(gateway_for) -> None:
    async with FakeBedrockClaude() as fake:
        # message_start, content_block_start, then the first delta; the exception after it
        fake.inner.script.append(Claude(text="one two three four"))
        fake.script.append(Invoke(exception="modelStreamErrorException", exception_after=4))
        cfg = base_config([{"name": "aws/claude", "deployments": [dep("b1", fake.url)]}])
        async with gateway_for(cfg) as client:
            r = await client.post("/v1/chat/completions",
                                  json={"model": "aws/claude", "messages": HI, "stream": True})
            assert r.status_code == 200
            text, _, finishes, _ = _deltas(r.text)
            assert text and text != "one two three four" and finishes == []
            err = sse_objects(r.text)[-1]["error"]
            assert "modelStreamErrorException" in err["message"] and err["type"] == "upstream_error"


async def test_anthropic_caller_betas_ride_in_the_body(gateway_for) -> None:
    async with FakeBedrockClaude() as fake:
        cfg = base_config([{"name": "aws/claude", "deployments": [dep("b1", fake.url)]}])
        async with gateway_for(cfg) as client:
            r = await client.post(
                "/v1/messages",
                json=ASK,
                headers={"anthropic-beta": "context-1m-2025-08-07, token-efficient-tools-2025-02-19"})
            assert r.status_code == 200, r.text
            assert fake.requests[-1].body["anthropic_beta"] == ["context-1m-2025-08-07",
                                                                "token-efficient-tools-2025-02-19"]
            r = await client.post(
                "/v1/messages",
                json=ASK,
                headers={"anthropic-beta": "bad beta\"name"})
            assert r.status_code == 400 and "anthropic-beta" in r.text
            assert len(fake.requests) == 1


def test_a_chunk_carries_one_anthropic_event() -> None:
    from switchyard.providers.aws.invoke_claude import InvokeStream
    from switchyard.providers.wire import WireError

    s = InvokeStream()
    ev = {"type": "message_start", "message": {"usage": {"input_tokens": 3}}}
    chunk = {"bytes": base64.b64encode(json.dumps(ev).encode()).decode()}
    assert s.feed(b"chunk", json.dumps(chunk).encode()) == [] and not s.done
    with pytest.raises(WireError, match="malformed chunk"):
        s.feed(b"chunk", b'{"bytes": "not base64!"}')


# -- the native lane: an Anthropic caller's body as sent, in InvokeModel's envelope ------------------


async def test_boto3_count_tokens_is_served() -> None:
    async with FakeBedrockClaude() as fake:
        body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 10,
                "messages": [{"role": "user", "content": "count these words please"}]}
        with contextlib.closing(_boto(fake.url)) as bt:
            out = await asyncio.to_thread(lambda: bt.count_tokens(
                modelId=MODEL, input={"invokeModel": {"body": json.dumps(body).encode()}}))
        assert out["inputTokens"] == FakeAnthropic.tokens({"messages": body["messages"]}) > 0
        assert fake.requests[-1].operation == "CountTokens" and fake.requests[-1].body == body


async def test_an_anthropic_callers_body_arrives_as_sent_and_counts_upstream(gateway_for) -> None:
    from tests.providers.test_anthropic_native import TURNS, ask, client, system

    async with FakeBedrockClaude() as fake:
        cfg = base_config([{"name": "anthropic/claude", "deployments": [dep("b1", fake.url)],
                            "max_output_tokens": 1000}])
        sent: list[bytes] = []
        async with gateway_for(cfg) as gw:
            c = client(gw, sent)
            fake.inner.script.append(Claude(text="hi from bedrock"))
            msg = await c.messages.create(**ask(3), extra_headers={"anthropic-beta": "context-1m-2025-08-07"})
            n = await c.messages.count_tokens(model="anthropic/claude", system=system(4), messages=TURNS)
    assert msg.content[0].text == "hi from bedrock"  # type: ignore[union-attr]
    invoke, count = fake.requests
    assert invoke.operation == "InvokeModel"
    caller = {k: v for k, v in json.loads(sent[0]).items() if k != "model"}
    # Byte for byte: the caller's fields in its order, max_tokens capped, the envelope added.
    raw = msgspec.json.encode({**caller, "max_tokens": 1000, "anthropic_version": "bedrock-2023-05-31",
                               "anthropic_beta": ["context-1m-2025-08-07"]})
    assert msgspec.json.encode(invoke.body) == raw
    assert invoke.body["system"] == system(3) and invoke.body["messages"] == TURNS
    assert count.operation == "CountTokens" and count.model == MODEL
    assert count.body["system"] == system(4) and "model" not in count.body
    assert n.input_tokens == FakeAnthropic.tokens({"system": system(4), "messages": TURNS})
