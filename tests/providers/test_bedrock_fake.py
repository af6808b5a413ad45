"""Calibrates tests/fakes/bedrock.py with boto3's own bedrock-runtime client: what AWS's client
sends, the fake accepts (service model, SigV4 recomputed); what the fake answers, the client parses
(Converse bodies, ConverseStream frames, exception frames, JSON errors)."""

from __future__ import annotations

import asyncio
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError

from switchyard.providers.aws.sigv4 import Credentials, SigV4
from tests.fakes.bedrock import ACCESS_KEY, REGION, SECRET_KEY, FakeBedrock, Reply

MODEL = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-v1:0"
MSG = [{"role": "user", "content": [{"text": "hi"}]}]


def _client(url: str, secret: str = SECRET_KEY, token: str | None = None) -> Any:
    return boto3.client(
        "bedrock-runtime",
        region_name=REGION,
        endpoint_url=url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=secret,
        aws_session_token=token,
        config=Config(retries={"total_max_attempts": 1}),
    )


async def test_converse_and_stream_parse_in_boto3() -> None:
    async with FakeBedrock() as aws:
        aws.script.append(
            Reply(
                text="a b",
                tools=[("get", {"x": 1})],
                usage={"inputTokens": 5, "outputTokens": 2, "cacheReadInputTokens": 4},
            )
        )
        out = await asyncio.to_thread(_client(aws.url, token="sess").converse, modelId=MODEL, messages=MSG)
        assert out["stopReason"] == "tool_use"
        assert out["output"]["message"]["content"] == [
            {"text": "a b"},
            {"toolUse": {"toolUseId": "tooluse_0", "name": "get", "input": {"x": 1}}},
        ]
        assert out["usage"]["totalTokens"] == 11
        assert aws.requests[-1].model == MODEL and aws.requests[-1].operation == "Converse"

        aws.script.append(Reply(text="a b", tools=[("f", {"k": "v"}), ("g", {})]))

        def stream() -> list[dict[str, Any]]:
            resp = _client(aws.url).converse_stream(modelId=MODEL, messages=MSG)
            return list(resp["stream"])

        events = await asyncio.to_thread(stream)
        names = [next(iter(e)) for e in events]
        assert names[0] == "messageStart" and names[-2:] == ["messageStop", "metadata"]
        assert (
            "".join(
                e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
            )
            == "a b"
        )
        starts = [e["contentBlockStart"] for e in events if "contentBlockStart" in e]
        assert [(s["contentBlockIndex"], s["start"]["toolUse"]["name"]) for s in starts] == [
            (1, "f"),
            (2, "g"),
        ]
        assert events[-1]["metadata"]["usage"] == {"inputTokens": 7, "outputTokens": 3, "totalTokens": 10}


async def test_errors_parse_in_boto3() -> None:
    async with FakeBedrock() as aws:
        aws.script.append(Reply(error="ThrottlingException"))
        with pytest.raises(ClientError) as e:
            await asyncio.to_thread(_client(aws.url).converse, modelId=MODEL, messages=MSG)
        assert e.value.response["Error"]["Code"] == "ThrottlingException"
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429

        aws.script.append(Reply(text="a b c", exception="modelStreamErrorException", exception_after=2))

        def stream() -> list[Any]:
            return list(_client(aws.url).converse_stream(modelId=MODEL, messages=MSG)["stream"])

        with pytest.raises(EventStreamError) as es:
            await asyncio.to_thread(stream)
        assert es.value.response["Error"]["Code"] == "modelStreamErrorException"

        with pytest.raises(ClientError) as e:  # a wrong secret: the recomputed signature differs
            await asyncio.to_thread(_client(aws.url, secret="wrong").converse, modelId=MODEL, messages=MSG)
        assert e.value.response["Error"]["Code"] == "InvalidSignatureException"


async def test_bearer_api_key_as_boto3_sends_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """boto3 sends a Bedrock API key only over https: its request is caught before sending and
    replayed to the fake over loopback http."""
    from tests.fakes.bedrock import API_KEY

    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", API_KEY)
    client = boto3.client("bedrock-runtime", region_name=REGION, endpoint_url="https://127.0.0.1:9")
    seen: list[Any] = []

    def capture(request: Any, **_: Any) -> None:
        seen.append(request)
        raise _Captured

    client.meta.events.register("before-send.bedrock-runtime.Converse", capture)
    with pytest.raises(_Captured):
        client.converse(modelId="m", messages=MSG)
    sent = {k.lower(): v.decode() if isinstance(v, bytes) else v for k, v in seen[0].headers.items()}
    assert sent["authorization"] == f"Bearer {API_KEY}"
    async with FakeBedrock() as aws, httpx.AsyncClient() as c:
        r = await c.post(
            aws.url + "/model/m/converse",
            content=seen[0].body,
            headers={"authorization": sent["authorization"], "content-type": sent["content-type"]},
        )
        assert r.status_code == 200, r.text
        assert r.json()["output"]["message"]["content"][0]["text"] == "Hello from Bedrock"
        r = await c.post(
            aws.url + "/model/m/converse", content=seen[0].body, headers={"authorization": "Bearer wrong"}
        )
        assert r.status_code == 403


class _Captured(Exception):
    pass


async def test_invalid_body_is_a_validation_exception() -> None:
    """The fake checks bodies against the service model (boto3 itself would refuse to send this)."""
    async with FakeBedrock() as aws:
        body = (
            b'{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"maxTokens":"ten"}}'
        )
        path = "/model/m/converse"
        signer = SigV4("bedrock", REGION, lambda: Credentials(ACCESS_KEY, SECRET_KEY))
        host = f"127.0.0.1:{aws.port}"
        headers = signer.sign("POST", host, path, "", {}, body)
        async with httpx.AsyncClient() as c:
            r = await c.post(aws.url + path, content=body, headers=headers)
        assert r.status_code == 400, r.text
        assert r.headers["x-amzn-errortype"].startswith("ValidationException")
        assert "maxTokens" in r.json()["message"]


async def test_claude_thinking_parses_in_boto3() -> None:
    """Claude's thinking as boto3 asks for it (additionalModelRequestFields): the answer's
    reasoningContent block and the stream's reasoningContent deltas (text, then the signature)
    parse in boto3; a Claude that does not think, a budget under 1024 and maxTokens not above the
    budget are ValidationExceptions, as on Bedrock."""
    from tests.fakes.bedrock import SIGNATURE

    think = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    kw: Any = {"modelId": MODEL, "messages": MSG, "inferenceConfig": {"maxTokens": 2048},
               "additionalModelRequestFields": think}
    async with FakeBedrock() as aws:
        aws.script.append(Reply(text="yes", reasoning="hmm, yes"))
        out = await asyncio.to_thread(_client(aws.url).converse, **kw)
        assert out["output"]["message"]["content"] == [
            {"reasoningContent": {"reasoningText": {"text": "hmm, yes", "signature": SIGNATURE}}},
            {"text": "yes"},
        ]

        def stream() -> list[dict[str, Any]]:
            return list(_client(aws.url).converse_stream(**kw)["stream"])

        aws.script.append(Reply(text="yes", reasoning="hmm, yes"))
        deltas = [e["contentBlockDelta"] for e in await asyncio.to_thread(stream) if "contentBlockDelta" in e]
        thought = [d["delta"]["reasoningContent"] for d in deltas if d["contentBlockIndex"] == 0]
        assert "".join(t.get("text", "") for t in thought) == "hmm, yes"
        assert thought[-1] == {"signature": SIGNATURE}
        assert [d["delta"] for d in deltas if d["contentBlockIndex"] == 1] == [{"text": "yes"}]
        plain = await asyncio.to_thread(_client(aws.url).converse, modelId=MODEL, messages=MSG)
        assert [next(iter(b)) for b in plain["output"]["message"]["content"]] == ["text"]
        refused = [
            ({**kw, "modelId": "anthropic.claude-3-5-sonnet-20240620-v1:0"}, "Extra inputs are not"),
            ({**kw, "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 500}}},
             "greater than or equal to 1024"),
            ({**kw, "inferenceConfig": {"maxTokens": 1024}}, "must be greater than `thinking.budget_tokens`"),
        ]
        for call, said in refused:
            with pytest.raises(ClientError, match=said) as e:
                await asyncio.to_thread(_client(aws.url).converse, **call)
            assert e.value.response["Error"]["Code"] == "ValidationException"
