"""``POST /v1/embeddings`` over an OpenAI-dialect upstream, with the official ``openai`` SDK (float
and base64, which the SDK asks for by default and decodes itself) and LangChain's OpenAIEmbeddings:
forwarded as written, usage summed, limits counting input tokens, errors naming the field."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from langchain_openai import OpenAIEmbeddings
from openai.types import CreateEmbeddingResponse

from switchyard.core.deployments import ModelConfig
from switchyard.dialects.embeddings import floats_b64
from switchyard.policies.tokens import encoding
from tests.fakes.upstream import Behaviour, fake_vector
from tests.gateway.conftest import KEY, base_config, upstream_model
from tests.gateway.conftest import openai_sdk as client_for


@pytest.fixture
def cfg(upstream):  # type: ignore[no-untyped-def]
    return base_config([upstream_model("vendor/embed", upstream.url, model="text-embedding-3-small"),
                        upstream_model("sgp/x", upstream.url, dialect="sgp")], router={"retries": 0})


@pytest.mark.parametrize("fmt", ["float", "base64", None])
async def test_sdk_float_and_base64(cfg, gateway_for, upstream, fmt) -> None:
    kw = {"encoding_format": fmt} if fmt else {}  # None: the SDK's default (it asks for base64)
    async with gateway_for(cfg) as gw:
        r = await client_for(gw).embeddings.create(model="vendor/embed", input=["one two", "three"],
                                                   dimensions=4, **kw)
    assert r.model == "vendor/embed" and [d.index for d in r.data] == [0, 1]
    for d, text in zip(r.data, ["one two", "three"], strict=True):
        # Asked for base64 itself, the caller gets the string (the SDK decodes only its own default).
        vec = floats_b64(d.embedding) if fmt == "base64" else d.embedding  # type: ignore[arg-type]
        assert vec == pytest.approx(fake_vector(text, 4), abs=1e-6)
    assert r.usage.prompt_tokens == 3 == r.usage.total_tokens
    sent = upstream.requests[0]
    assert sent.path.endswith("/embeddings")
    assert sent.body == {"model": "text-embedding-3-small", "input": ["one two", "three"], "dimensions": 4,
                         "encoding_format": fmt or "base64"}


async def test_token_arrays_and_a_string(cfg, gateway_for, upstream) -> None:
    async with gateway_for(cfg) as gw:
        one = await gw.post("/v1/embeddings", json={"model": "vendor/embed", "input": "hello"})
        ids = await gw.post("/v1/embeddings", json={"model": "vendor/embed", "input": [[1, 2, 3], [4]]})
    assert one.status_code == 200 and ids.status_code == 200
    CreateEmbeddingResponse.model_validate(one.json())
    assert upstream.requests[0].body["input"] == "hello"
    assert upstream.requests[1].body["input"] == [[1, 2, 3], [4]]
    assert [d["embedding"] for d in ids.json()["data"]] == [fake_vector([1, 2, 3]), fake_vector([4])]
    assert ids.json()["usage"] == {"prompt_tokens": 4, "total_tokens": 4}


async def test_langchain_openai_embeddings(cfg, gateway_for) -> None:
    async with gateway_for(cfg) as gw, httpx.AsyncClient() as http:  # LangChain leaves its own open
        # check_embedding_ctx_length=False: send text (by default it tokenizes with tiktoken's
        # cl100k, which only OpenAI's own models read).
        lc = OpenAIEmbeddings(model="vendor/embed", api_key=KEY, base_url=str(gw.base_url) + "/v1",  # type: ignore[arg-type]
                              check_embedding_ctx_length=False, max_retries=0, http_async_client=http)
        docs = await lc.aembed_documents(["alpha", "beta"])
        q = await lc.aembed_query("alpha")
    assert docs[0] == pytest.approx(fake_vector("alpha"), abs=1e-6) and q == pytest.approx(docs[0])


async def test_langchain_openai_embeddings_default_sends_token_ids(cfg, gateway_for, upstream) -> None:
    """LangChain's default (check_embedding_ctx_length=True) tokenizes with tiktoken's cl100k and
    sends token arrays: forwarded as ids, each text's vector that of its ids."""
    cl100k = encoding("cl100k_base")  # the packaged copy, in tiktoken's registry: no download
    async with gateway_for(cfg) as gw, httpx.AsyncClient() as http:
        lc = OpenAIEmbeddings(model="vendor/embed", api_key=KEY, base_url=str(gw.base_url) + "/v1",  # type: ignore[arg-type]
                              max_retries=0, http_async_client=http)
        docs = await lc.aembed_documents(["alpha beta", "gamma"])
        q = await lc.aembed_query("alpha beta")
    ids = [cl100k.encode("alpha beta"), cl100k.encode("gamma")]
    assert upstream.requests[0].body["input"] == ids
    # LangChain averages and renormalises each text's chunks: one chunk, the same unit vector.
    assert docs == [pytest.approx(fake_vector(i), abs=1e-6) for i in ids]
    assert q == pytest.approx(docs[0], abs=1e-6)


@pytest.mark.parametrize(("body", "param"), [
    ({}, "input"),
    ({"input": ""}, "input"),
    ({"input": ["a", ""]}, "input[1]"),
    ({"input": [1, "a"]}, "input"),
    ({"input": ["x"] * 2049}, "input"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "a", "dimensions": 0}, "dimensions"),
    ({"input": "a", "model": "sgp/x"}, "model"),
])
async def test_refusals_name_the_field(cfg, gateway_for, upstream, body, param) -> None:
    async with gateway_for(cfg) as gw:
        r = await gw.post("/v1/embeddings", json={"model": "vendor/embed", **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert not upstream.requests


async def test_upstream_failures_are_502(cfg, gateway_for, upstream) -> None:
    upstream.script.append(Behaviour(status=500, error="boom"))
    async with gateway_for(cfg) as gw:
        with pytest.raises(openai.InternalServerError) as e:
            await client_for(gw).embeddings.create(model="vendor/embed", input="x")
    assert e.value.status_code == 502 and "upstream d1: HTTP 500" in str(e.value)


async def test_limits_count_input_tokens(upstream, gateway_for) -> None:
    """Admission holds the input's tokens and no completion (any completion reserve would refuse a
    10-token minute at once); settlement charges the upstream's count (6 a call): the third call
    finds the minute spent."""
    cfg = base_config([upstream_model("vendor/embed", upstream.url)], router={"retries": 0},
                      keys=[{"id": "k1", "team": "t", "key": KEY, "limits": {"tpm": 10}}])
    body = {"model": "vendor/embed", "input": "a b c d e f"}
    async with gateway_for(cfg) as gw:
        got = [await gw.post("/v1/embeddings", json=body) for _ in range(3)]
    assert [r.status_code for r in got] == [200, 200, 429], got[-1].text
    left = [int(r.headers["x-ratelimit-remaining-tokens"]) for r in got[:2]]
    assert left[0] >= 4 and left[1] < left[0]


async def test_concurrent_callers(cfg, gateway_for) -> None:
    async with gateway_for(cfg) as gw:
        oa = client_for(gw)
        got = await asyncio.gather(*(oa.embeddings.create(model="vendor/embed", input=f"t{i}")
                                     for i in range(16)))
    assert [r.data[0].embedding for r in got] == [pytest.approx(fake_vector(f"t{i}"), abs=1e-6)
                                                  for i in range(16)]


async def test_unauthenticated(cfg, gateway_for) -> None:
    async with gateway_for(cfg) as gw, httpx.AsyncClient() as bare:  # no key
        r = await bare.post(str(gw.base_url) + "/v1/embeddings", json={"model": "vendor/embed", "input": "x"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(("api_version", "path"), [
    (None, "/openai/v1/embeddings"), ("2024-10-21", "/openai/deployments/emb-deploy/embeddings")])
async def test_azure_paths_and_key(upstream, gateway_for, api_version, path) -> None:
    dep = {"name": "az", "backend": "upstream", "provider": "azure", "base_url": upstream.root,
           "api_key": "sk-azure-upstream", "model": "emb-deploy", "api_version": api_version}
    cfg = base_config([{"name": "azure/emb", "deployments": [dep]}], router={"retries": 0})
    async with gateway_for(cfg) as gw:
        r = await client_for(gw).embeddings.create(model="azure/emb", input=["a", "b"])
    assert [d.embedding for d in r.data] == [pytest.approx(fake_vector(t), abs=1e-6) for t in "ab"]
    sent = upstream.requests[0]
    assert sent.path == path and sent.headers["api-key"] == "sk-azure-upstream"
    assert "authorization" not in {k.lower() for k in sent.headers}
    assert sent.body["model"] == "emb-deploy" and sent.body["input"] == ["a", "b"]


async def test_models_list_marks_embedding_models(cfg, gateway_for, upstream) -> None:
    """``mode`` on each /v1/models entry: implied by a name that says embed, or configured; the
    openai SDK's models.list() reads the list and keeps the field; OpenAPI documents it."""
    bge = {**upstream_model("vendor/bge", upstream.url, model="bge-small-en"), "mode": "embedding"}
    with_bge = base_config([*[m.model_dump() for m in cfg.models], bge], router={"retries": 0})
    async with gateway_for(with_bge) as gw:
        listed = [m async for m in client_for(gw).models.list()]
        doc = (await gw.get("/schema/openapi.json")).json()
    modes = {m.id: (m.model_extra or {})["mode"] for m in listed}
    assert modes == {"vendor/embed": "embedding", "sgp/x": "chat", "vendor/bge": "embedding"}
    item = doc["paths"]["/v1/models"]["get"]["responses"]["200"]["content"]["application/json"][
        "schema"]["properties"]["data"]["items"]
    assert item["properties"]["mode"]["enum"] == ["chat", "embedding"]


def test_a_mode_that_contradicts_the_backend_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="mode chat does not fit a deployment with backend embedder"):
        ModelConfig(name="local/emb", mode="chat", deployments=[{"name": "e", "backend": "embedder"}])
