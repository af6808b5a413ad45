"""Embeddings on Bedrock's InvokeModel: the fake (tests/fakes/bedrock_embed.py) calibrated with
boto3's ``invoke_model``, then the openai SDK's ``embeddings.create`` -> the gateway -> the fake:
Titan fanned out one call per input (never more than the bound at once, vectors in input order,
usage summed), ``dimensions`` to Titan v2 and Cohere v4, base64, Cohere Embed split at 96 texts
with its usage from Bedrock's header (or the gateway's estimate without it), errors as chat's,
and what a deployment cannot serve refused with a 400 naming the field."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from switchyard.dialects.embeddings import floats_b64
from switchyard.routing.fanout import EMBED_CONCURRENCY
from tests.fakes import bedrock as aws
from tests.fakes.bedrock_embed import FakeBedrockEmbed, tokens, vector
from tests.gateway.conftest import base_config
from tests.gateway.conftest import openai_sdk as _client

TITAN_V2, TITAN_V1 = "amazon.titan-embed-text-v2:0", "amazon.titan-embed-text-v1"
COHERE_V3, COHERE_V4 = "cohere.embed-english-v3", "cohere.embed-v4:0"


def _boto(url: str) -> Any:
    return boto3.client("bedrock-runtime", region_name=aws.REGION, endpoint_url=url,
                        aws_access_key_id=aws.ACCESS_KEY, aws_secret_access_key=aws.SECRET_KEY,
                        config=Config(retries={"total_max_attempts": 1}))


def _invoke(url: str, model: str, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    with contextlib.closing(_boto(url)) as bt:
        out = bt.invoke_model(modelId=model, body=json.dumps(body), contentType="application/json",
                              accept="application/json")
        return json.loads(out["body"].read()), out["ResponseMetadata"]["HTTPHeaders"]


def dep(name: str, url: str, model: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "backend": "upstream", "provider": "bedrock", "base_url": url,
            "region": aws.REGION, "model": model, "aws_access_key_id": aws.ACCESS_KEY,
            "aws_secret_access_key": aws.SECRET_KEY, **kw}


def _models(url: str, **kw: Any) -> list[dict[str, Any]]:
    return [{"name": f"aws/{m}", "deployments": [dep("e1", url, m, **kw)]}
            for m in (TITAN_V2, TITAN_V1, COHERE_V3, COHERE_V4)]


# -- calibration ----------------------------------------------------------------------------------


async def test_boto3_invoke_model_titan_and_cohere() -> None:
    async with FakeBedrockEmbed() as fake:
        ans, headers = await asyncio.to_thread(
            _invoke, fake.url, TITAN_V2, {"inputText": "hello there", "dimensions": 256, "normalize": True})
        assert ans["embedding"] == vector("hello there", 4) and ans["inputTextTokenCount"] == 2
        assert headers["x-amzn-bedrock-input-token-count"] == "2"
        assert fake.requests[-1].body == {"inputText": "hello there", "dimensions": 256, "normalize": True}

        ans, _ = await asyncio.to_thread(_invoke, fake.url, TITAN_V1, {"inputText": "hi"})
        assert len(ans["embedding"]) == 24 and "embeddingsByType" not in ans

        with pytest.raises(ClientError) as e:  # G1 takes inputText alone
            await asyncio.to_thread(_invoke, fake.url, TITAN_V1, {"inputText": "hi", "dimensions": 256})
        assert e.value.response["Error"]["Code"] == "ValidationException"

        body = {"texts": ["a b", "c"], "input_type": "search_document", "embedding_types": ["float"]}
        ans, headers = await asyncio.to_thread(_invoke, fake.url, COHERE_V3, body)
        assert ans["response_type"] == "embeddings_by_type" and ans["texts"] == ["a b", "c"]
        assert ans["embeddings"]["float"] == [vector("a b", 16), vector("c", 16)]
        assert headers["x-amzn-bedrock-input-token-count"] == "3" and "inputTextTokenCount" not in ans

        ans, _ = await asyncio.to_thread(_invoke, fake.url, COHERE_V3,
                                         {"texts": ["a"], "input_type": "search_query"})
        assert ans["response_type"] == "embeddings_floats" and ans["embeddings"] == [vector("a", 16)]

        for bad in ({"texts": ["x"] * 97, "input_type": "search_document"},
                    {"texts": ["x"], "input_type": "search_document", "output_dimension": 256},  # v3
                    {"texts": ["x"]}):
            with pytest.raises(ClientError) as e:
                await asyncio.to_thread(_invoke, fake.url, COHERE_V3, bad)
            assert e.value.response["Error"]["Code"] == "ValidationException"

        fake.script.append("ThrottlingException")
        with pytest.raises(ClientError) as e:
            await asyncio.to_thread(_invoke, fake.url, TITAN_V2, {"inputText": "x"})
        assert e.value.response["Error"]["Code"] == "ThrottlingException"


# -- through the gateway --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["float", "base64", None])
async def test_titan_fans_out_one_call_per_input_in_order(gateway_for, fmt: str | None) -> None:
    texts = [f"text number {i}" for i in range(3 * EMBED_CONCURRENCY + 3)]
    async with FakeBedrockEmbed(hold=EMBED_CONCURRENCY, linger=0.05) as fake:
        async with gateway_for(base_config(_models(fake.url))) as gw:
            kw = {"encoding_format": fmt} if fmt else {}  # None: the SDK asks for base64 and decodes it
            r = await _client(gw).embeddings.create(model=f"aws/{TITAN_V2}", input=texts, **kw)  # type: ignore[arg-type]
        assert len(fake.requests) == len(texts)
        assert sorted(s.body["inputText"] for s in fake.requests) == sorted(texts)
        assert all(s.body == {"inputText": s.body["inputText"], "normalize": True} for s in fake.requests)
        assert fake.peak == EMBED_CONCURRENCY  # the bound reached, never passed
    assert [d.index for d in r.data] == list(range(len(texts)))
    for d, t in zip(r.data, texts, strict=True):
        got = floats_b64(d.embedding) if fmt == "base64" else d.embedding  # type: ignore[arg-type]
        assert got == pytest.approx(vector(t, 16), abs=1e-6)
    assert r.usage.prompt_tokens == sum(tokens(t) for t in texts) == r.usage.total_tokens


async def test_dimensions_reach_titan_v2_and_cohere_v4(gateway_for) -> None:
    async with FakeBedrockEmbed() as fake:
        async with gateway_for(base_config(_models(fake.url))) as gw:
            r = await _client(gw).embeddings.create(model=f"aws/{TITAN_V2}", input=["a", "b"], dimensions=512,
                                                    encoding_format="float")
            assert [d.embedding for d in r.data] == [vector("a", 8), vector("b", 8)]
            assert [s.body["dimensions"] for s in fake.requests] == [512, 512]
            r = await _client(gw).embeddings.create(model=f"aws/{COHERE_V4}", input="a", dimensions=256,
                                                    encoding_format="float")
            assert r.data[0].embedding == vector("a", 4)
            assert fake.requests[-1].body == {"texts": ["a"], "embedding_types": ["float"],
                                              "input_type": "search_document", "output_dimension": 256}
            for model, dims, says in ((TITAN_V1, 256, "fixed vector size"), (TITAN_V2, 300, "256, 512, 1024"),
                                      (COHERE_V3, 256, "fixed vector size")):
                bad = await gw.post("/v1/embeddings", json={"model": f"aws/{model}", "input": "a",
                                                            "dimensions": dims})
                assert bad.status_code == 400, bad.text
                err = bad.json()["error"]
                assert err["param"] == "dimensions" and says in err["message"]
        assert len(fake.requests) == 3  # the refusals sent nothing


async def test_cohere_on_bedrock_splits_at_96_with_the_header_usage(gateway_for) -> None:
    texts = [f"doc {i}" for i in range(100)]
    async with FakeBedrockEmbed() as fake, gateway_for(base_config(_models(fake.url))) as gw:
        r = await _client(gw).embeddings.create(model=f"aws/{COHERE_V3}", input=texts,
                                                encoding_format="float")
    assert sorted(len(s.body["texts"]) for s in fake.requests) == [4, 96]
    first = next(s.body for s in fake.requests if len(s.body["texts"]) == 96)
    assert first == {"texts": texts[:96], "embedding_types": ["float"], "input_type": "search_document"}
    assert [d.embedding for d in r.data] == [vector(t, 16) for t in texts]
    assert r.usage.prompt_tokens == 200  # two words each, from X-Amzn-Bedrock-Input-Token-Count


async def test_without_the_header_the_gateway_estimate_stands(gateway_for) -> None:
    fake = FakeBedrockEmbed(token_header=False)
    async with fake, gateway_for(base_config(_models(fake.url))) as gw:
        one = await _client(gw).embeddings.create(model=f"aws/{COHERE_V3}", input=["abcdefgh", "abcde"])
        texts = ["abcdefghi"] * 60 + ["ab"] * 60  # two calls, neither with a count
        split = await _client(gw).embeddings.create(model=f"aws/{COHERE_V3}", input=texts)
    assert one.usage.prompt_tokens == math.ceil(8 / 4) + math.ceil(5 / 4)  # the bytes/4 estimate
    assert split.usage.prompt_tokens == 60 * 3 + 60 * 1 and len(fake.requests) == 3


async def test_callers_input_type_passes_where_allowed(gateway_for) -> None:
    async with FakeBedrockEmbed() as fake:
        cfg = base_config([{"name": "aws/co", "deployments": [
            dep("e1", fake.url, COHERE_V3, allow_extra_params=["input_type"])]}])
        async with gateway_for(cfg) as gw:
            await _client(gw).embeddings.create(model="aws/co", input="q",
                                                extra_body={"input_type": "search_query"})
    assert fake.requests[-1].body["input_type"] == "search_query"


@pytest.mark.parametrize("error", ["ThrottlingException", "ModelErrorException"])
async def test_upstream_errors_are_retried_and_mapped_as_chats(gateway_for, error: str) -> None:
    async with FakeBedrockEmbed() as bad, FakeBedrockEmbed() as ok:
        bad.script.append(error)
        cfg = base_config([{"name": "aws/t", "deployments": [dep("bad", bad.url, TITAN_V2, weight=1000),
                                                             dep("ok", ok.url, TITAN_V2, weight=0.001)]}])
        async with gateway_for(cfg) as gw:
            r = await _client(gw).embeddings.create(model="aws/t", input=["x"], encoding_format="float")
        assert r.data[0].embedding == vector("x", 16) and len(bad.requests) == 1 and len(ok.requests) == 1

    async with FakeBedrockEmbed() as only:
        only.script += ["ServiceUnavailableException"] * 3
        cfg = base_config([{"name": "aws/t", "deployments": [dep("only", only.url, TITAN_V2)]}],
                          router={"retries": 0})
        async with gateway_for(cfg) as gw:
            out = await gw.post("/v1/embeddings", json={"model": "aws/t", "input": ["a", "b", "c"]})
    assert out.status_code == 503, out.text
    assert "only" in out.json()["error"]["message"]


async def test_what_a_deployment_cannot_serve_is_a_400(gateway_for) -> None:
    async with FakeBedrockEmbed() as fake:
        models = [*_models(fake.url), {"name": "aws/claude", "deployments": [
            dep("c1", fake.url, "anthropic.claude-3-haiku-20240307-v1:0")]}]
        async with gateway_for(base_config(models)) as gw:
            ids = await gw.post("/v1/embeddings", json={"model": f"aws/{TITAN_V2}", "input": [[1, 2, 3]]})
            chat = await gw.post("/v1/chat/completions", json={
                "model": f"aws/{TITAN_V2}", "messages": [{"role": "user", "content": "hi"}]})
            emb = await gw.post("/v1/embeddings", json={"model": "aws/claude", "input": "hi"})
    assert ids.status_code == 400 and ids.json()["error"]["param"] == "input"
    assert "token-id" in ids.json()["error"]["message"]
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "model"
    assert "serves embeddings only" in chat.json()["error"]["message"]
    assert emb.status_code == 400 and emb.json()["error"]["param"] == "model"
    assert "no embeddings endpoint" in emb.json()["error"]["message"]
    assert fake.requests == []
