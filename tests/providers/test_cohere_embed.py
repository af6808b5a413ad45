"""Cohere's own Embed API (``/v2/embed``) for a ``cohere`` deployment of an Embed model: the fake
(tests/fakes/cohere.py) calibrated with the cohere SDK's ``ClientV2``, then the openai SDK's
``embeddings.create`` -> the gateway -> the fake: the exact body, vectors in order, billed usage,
more than 96 inputs split, ``dimensions`` as ``output_dimension``, errors as chat's, and the
compatibility API's base URL read as the API's root."""

from __future__ import annotations

import asyncio
from typing import Any

import cohere
import pytest
from cohere.core.api_error import ApiError

from switchyard.dialects.embeddings import floats_b64
from tests.fakes.bedrock_embed import tokens, vector
from tests.fakes.cohere import KEY as CO_KEY
from tests.fakes.cohere import FakeCohere
from tests.gateway.conftest import base_config
from tests.gateway.conftest import openai_sdk as _client

MODEL = "embed-english-v3.0"


def dep(name: str, url: str, model: str = MODEL, **kw: Any) -> dict[str, Any]:
    return {"name": name, "backend": "upstream", "provider": "cohere", "base_url": url, "api_key": CO_KEY,
            "model": model, **kw}


async def test_the_cohere_sdk_is_served() -> None:
    async with FakeCohere() as fake:
        with cohere.ClientV2(CO_KEY, base_url=fake.url, max_retries=0) as co, \
                cohere.ClientV2("wrong", base_url=fake.url, max_retries=0) as wrong:
            r = await asyncio.to_thread(lambda: co.embed(model=MODEL, texts=["a b", "c"],
                                                         input_type="search_query",
                                                         embedding_types=["float"]))
            assert r.embeddings.float_ == [vector("a b", 16), vector("c", 16)]
            assert r.meta is not None and r.meta.billed_units is not None
            assert r.meta.billed_units.input_tokens == 3
            assert fake.requests[-1] == {"model": MODEL, "texts": ["a b", "c"], "input_type": "search_query",
                                         "embedding_types": ["float"]}
            r = await asyncio.to_thread(lambda: co.embed(model="embed-v4.0", texts=["a"],
                                                         input_type="clustering", output_dimension=512))
            assert r.embeddings.float_ == [vector("a", 8)]
            for bad in ({"texts": ["x"] * 97}, {"texts": ["x"], "output_dimension": 256}):
                with pytest.raises(ApiError) as e:
                    await asyncio.to_thread(lambda b=bad: co.embed(model=MODEL, input_type="search_document",
                                                                   **b))
                assert e.value.status_code == 400
            fake.script.append(429)
            with pytest.raises(cohere.TooManyRequestsError):
                await asyncio.to_thread(lambda: co.embed(model=MODEL, texts=["x"],
                                                         input_type="search_document"))
            with pytest.raises(ApiError) as e:
                await asyncio.to_thread(lambda: wrong.embed(model=MODEL, texts=["x"],
                                                            input_type="search_document"))
            assert e.value.status_code == 401


@pytest.mark.parametrize("base", ["", "/compatibility/v1"])
async def test_embeddings_through_the_gateway(gateway_for, base: str) -> None:
    texts = [f"doc {i}" for i in range(100)]
    async with FakeCohere() as fake:
        cfg = base_config([{"name": "co/embed", "deployments": [dep("c1", fake.url + base)]}])
        async with gateway_for(cfg) as gw:
            r = await _client(gw).embeddings.create(model="co/embed", input=texts)  # the SDK's base64
            one = await _client(gw).embeddings.create(model="co/embed", input="hello",
                                                      encoding_format="base64")
    assert [d.embedding for d in r.data] == [pytest.approx(vector(t, 16), abs=1e-6) for t in texts]
    assert r.usage.prompt_tokens == sum(tokens(t) for t in texts)  # billed_units, summed over two calls
    assert sorted(len(b["texts"]) for b in fake.requests[:2]) == [4, 96]
    assert fake.requests[2] == {"model": MODEL, "texts": ["hello"], "embedding_types": ["float"],
                                "input_type": "search_document"}
    assert floats_b64(one.data[0].embedding) == pytest.approx(vector("hello", 16), abs=1e-6)  # type: ignore[arg-type]


async def test_dimensions_and_input_type(gateway_for) -> None:
    async with FakeCohere() as fake:
        cfg = base_config([{"name": "co/v4", "deployments": [
            dep("c1", fake.url, "embed-v4.0", allow_extra_params=["input_type"])]}])
        async with gateway_for(cfg) as gw:
            r = await _client(gw).embeddings.create(model="co/v4", input="q", dimensions=256,
                                                    encoding_format="float",
                                                    extra_body={"input_type": "search_query"})
    assert r.data[0].embedding == vector("q", 4)
    assert fake.requests[-1] == {"model": "embed-v4.0", "texts": ["q"], "embedding_types": ["float"],
                                 "input_type": "search_query", "output_dimension": 256}


async def test_errors_and_refusals(gateway_for) -> None:
    async with FakeCohere() as bad, FakeCohere() as ok:
        bad.script.append(429)
        cfg = base_config([
            {"name": "co/embed", "deployments": [dep("bad", bad.url, weight=1000),
                                                 dep("ok", ok.url, weight=0.001)]},
            {"name": "co/chat", "deployments": [dep("chat", ok.url, "command-a-03-2025")]}])
        async with gateway_for(cfg) as gw:
            r = await _client(gw).embeddings.create(model="co/embed", input=["x"], encoding_format="float")
            assert r.data[0].embedding == vector("x", 16) and len(bad.requests) == len(ok.requests) == 1
            bad.script += [500] * 5  # every attempt the router makes fails
            ok.script += [500] * 5
            failed = await gw.post("/v1/embeddings", json={"model": "co/embed", "input": "x"})
            chat = await gw.post("/v1/chat/completions", json={
                "model": "co/embed", "messages": [{"role": "user", "content": "hi"}]})
            emb = await gw.post("/v1/embeddings", json={"model": "co/chat", "input": "hi"})
            ids = await gw.post("/v1/embeddings", json={"model": "co/embed", "input": [[1, 2]]})
    assert failed.status_code == 502, failed.text
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "model"
    assert emb.status_code == 400 and emb.json()["error"]["param"] == "model"
    assert ids.status_code == 400 and ids.json()["error"]["param"] == "input"
    assert not [b for b in bad.requests + ok.requests if b["texts"] == ["hi"] or b["texts"] == [[1, 2]]]
