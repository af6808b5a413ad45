"""``POST /v1/embeddings`` through the gateway to Gemini API and Vertex AI deployments played by
the SDK-calibrated fake (tests/fakes/gemini.py, tests/fakes/gemini_embed.py), with the official
openai SDK as the caller: inputs in order, ``dimensions`` as outputDimensionality, float and
base64, usage (the upstream's count, else the gateway's estimate, recorded once), upstream
failures in the gateway's words, and what Google's embedding APIs cannot take refused by name."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import openai
import pytest

from switchyard.dialects.embeddings import floats_b64
from tests.fakes.gemini import API_KEY, FakeGemini, FakeTokenServer, Reply, vertex_dep
from tests.fakes.upstream import fake_vector
from tests.gateway.conftest import KEY, base_config
from tests.gateway.conftest import openai_sdk as client_for

TEXTS = ["one two", "three", "four five six"]
VERTEX = "/v1/projects/proj/locations/us-central1/publishers/google/models/"


def gemini_dep(url: str, model: str = "gemini-embedding-001") -> dict[str, Any]:
    return {
        "name": "g",
        "backend": "upstream",
        "provider": "gemini",
        "base_url": url,
        "api_key": API_KEY,
        "model": model,
    }


@asynccontextmanager
async def vertex(tmp_path: Any) -> AsyncIterator[tuple[FakeGemini, Any]]:
    """The fake with Vertex's token endpoint, and a deployment factory for a model on it."""
    async with FakeGemini() as fake:
        with FakeTokenServer(b"", fake.tokens) as tokens:
            base, _ = vertex_dep(tokens, tmp_path, fake.url, "")  # one key: the server trusts the last

            def dep(model: str) -> dict[str, Any]:
                return {**base, "model": model}

            yield fake, dep


def vectors(r: Any, fmt: str | None, dims: int) -> None:
    """The answer holds each input's vector in input order (decoded from base64 where asked)."""
    assert [d.index for d in r.data] == list(range(len(TEXTS)))
    for d, text in zip(r.data, TEXTS, strict=True):
        vec = floats_b64(d.embedding) if fmt == "base64" else d.embedding
        assert vec == pytest.approx(fake_vector(text, dims), abs=1e-6)


@pytest.mark.parametrize("fmt", ["float", "base64", None])
async def test_gemini_inputs_dimensions_and_encoding(gateway_for, fmt: str | None) -> None:
    kw = {"encoding_format": fmt} if fmt else {}  # None: the SDK's default (base64, decoded by it)
    async with FakeGemini() as fake:
        cfg = base_config([{"name": "google/embed", "deployments": [gemini_dep(fake.url)]}])
        async with gateway_for(cfg) as gw:
            r = await client_for(gw).embeddings.create(model="google/embed", input=TEXTS, dimensions=4, **kw)
    assert r.model == "google/embed"
    vectors(r, fmt, 4)
    seen = fake.requests[-1]
    assert seen.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert seen.headers["x-goog-api-key"] == API_KEY
    assert seen.body == {
        "requests": [
            {
                "model": "models/gemini-embedding-001",
                "content": {"parts": [{"text": t}]},
                "outputDimensionality": 4,
            }
            for t in TEXTS
        ]
    }
    # The Gemini API reported no count: the gateway's estimate, ceil(utf-8 bytes / 4) an input.
    assert r.usage.prompt_tokens == 2 + 2 + 4 == r.usage.total_tokens


async def test_gemini_reported_usage_wins_and_limits_count_it_once(gateway_for) -> None:
    """A 12-token minute: each call is 3 input tokens (the estimate of "abcdefghijkl"; the fake
    reports 1, a word), settled once, so four calls fit where a double count would fit two."""
    async with FakeGemini(embed_usage=True) as fake:
        cfg = base_config(
            [{"name": "google/embed", "deployments": [gemini_dep(fake.url)]}], router={"retries": 0}
        )
        async with gateway_for(cfg) as gw:
            r = await client_for(gw).embeddings.create(model="google/embed", input=TEXTS)
            assert r.usage.prompt_tokens == 6  # the fake's words
        fake.embed_usage = False
        cfg = base_config(
            [{"name": "google/embed", "deployments": [gemini_dep(fake.url)]}],
            router={"retries": 0},
            keys=[{"id": "k1", "team": "t", "key": KEY, "limits": {"tpm": 10}}],
        )
        async with gateway_for(cfg) as gw:
            body = {"model": "google/embed", "input": "abcdefghijkl"}
            got = [await gw.post("/v1/embeddings", json=body) for _ in range(4)]
    assert [g.status_code for g in got] == [200, 200, 200, 429], got[-1].text
    assert [g.json()["usage"]["prompt_tokens"] for g in got[:3]] == [3, 3, 3]


@pytest.mark.parametrize(
    ("status", "shown", "error"),
    [
        (500, 502, openai.InternalServerError),
        (503, 503, openai.InternalServerError),
        (429, 429, openai.RateLimitError),
        (400, 400, openai.BadRequestError),
    ],
)
async def test_gemini_upstream_errors(gateway_for, status: int, shown: int, error: type[Exception]) -> None:
    async with FakeGemini() as fake:
        fake.default = Reply(status=status)
        cfg = base_config(
            [{"name": "google/embed", "deployments": [gemini_dep(fake.url)]}], router={"retries": 0}
        )
        async with gateway_for(cfg) as gw:
            with pytest.raises(error) as e:
                await client_for(gw).embeddings.create(model="google/embed", input=["x", "y"])
    assert e.value.status_code == shown  # type: ignore[attr-defined]  # an openai.APIStatusError
    assert "upstream g" in str(e.value) and API_KEY not in str(e.value)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [[1, 2, 3]]}, "input"),
        ({"input": [[1, 2], [3]]}, "input"),
        ({"input": "a", "user": "u1"}, "user"),
    ],
)
async def test_gemini_refusals_name_the_field(gateway_for, body: dict[str, Any], param: str) -> None:
    async with FakeGemini() as fake:
        cfg = base_config([{"name": "google/embed", "deployments": [gemini_dep(fake.url)]}])
        async with gateway_for(cfg) as gw:
            r = await gw.post("/v1/embeddings", json={"model": "google/embed", **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and "gemini" in r.json()["error"]["message"]
    assert not fake.requests


@pytest.mark.parametrize("fmt", ["float", "base64"])
async def test_vertex_text_embedding_through_predict(gateway_for, tmp_path, fmt: str) -> None:
    async with vertex(tmp_path) as (fake, dep):
        cfg = base_config([{"name": "gcp/embed", "deployments": [dep("text-embedding-005")]}])
        async with gateway_for(cfg) as gw:
            r = await client_for(gw).embeddings.create(
                model="gcp/embed", input=TEXTS, dimensions=5, encoding_format=fmt
            )  # type: ignore[arg-type]
    vectors(r, fmt, 5)
    seen = fake.requests[-1]
    assert seen.path == VERTEX + "text-embedding-005:predict"
    assert {k.lower(): v for k, v in seen.headers.items()}["authorization"].startswith("Bearer ya29.fake-")
    assert seen.body == {
        "instances": [{"content": t} for t in TEXTS],
        "parameters": {"outputDimensionality": 5},
    }
    assert r.usage.prompt_tokens == 2 + 1 + 3  # statistics.token_count summed


async def test_vertex_gemini_embedding_through_batch_embed_contents(gateway_for, tmp_path) -> None:
    async with vertex(tmp_path) as (fake, dep):
        cfg = base_config([{"name": "gcp/embed", "deployments": [dep("gemini-embedding-001")]}])
        async with gateway_for(cfg) as gw:
            r = await client_for(gw).embeddings.create(model="gcp/embed", input=TEXTS, dimensions=3)
            one = await client_for(gw).embeddings.create(model="gcp/embed", input="solo word")
    vectors(r, None, 3)
    assert r.usage.prompt_tokens == 6 and one.usage.prompt_tokens == 2
    assert one.data[0].embedding == pytest.approx(fake_vector("solo word", 8), abs=1e-6)
    first = fake.requests[0]
    assert first.path == VERTEX + "gemini-embedding-001:batchEmbedContents"
    assert first.body == {
        "requests": [
            {"content": {"parts": [{"text": t}]}, "embedContentConfig": {"outputDimensionality": 3}}
            for t in TEXTS
        ]
    }
    assert fake.requests[1].body == {"requests": [{"content": {"parts": [{"text": "solo word"}]}}]}


async def test_vertex_failures_and_refusals(gateway_for, tmp_path) -> None:
    async with vertex(tmp_path) as (fake, dep):
        cfg = base_config(
            [
                {"name": "gcp/embed", "deployments": [dep("text-embedding-005")]},
                {"name": "gcp/claude", "deployments": [dep("claude-sonnet-4-5@20250929")]},
            ],
            router={"retries": 0},
        )
        async with gateway_for(cfg) as gw:
            fake.script.append(Reply(status=500))
            failed = await gw.post("/v1/embeddings", json={"model": "gcp/embed", "input": "x"})
            ids = await gw.post("/v1/embeddings", json={"model": "gcp/embed", "input": [[5, 6]]})
            many = await gw.post("/v1/embeddings", json={"model": "gcp/embed", "input": ["a"] * 251})
            calls = [len(r.body["instances"]) for r in fake.requests if r.path.endswith(":predict")]
            claude = await gw.post("/v1/embeddings", json={"model": "gcp/claude", "input": "x"})
    assert failed.status_code == 502 and "upstream v: HTTP 500" in failed.json()["error"]["message"]
    assert ids.status_code == 400 and ids.json()["error"]["param"] == "input"
    # More than Vertex's 250 a call: split by the router, the vectors back in input order.
    assert many.status_code == 200 and len(many.json()["data"]) == 251
    assert [d["index"] for d in many.json()["data"]] == list(range(251))
    assert sorted(calls[-2:]) == [1, 250]
    assert claude.status_code == 400, claude.text
    err = claude.json()["error"]
    assert err["param"] == "model" and "gcp/claude" in err["message"] and "embeddings" in err["message"]
    assert len(fake.requests) == 3  # the failed one and the two calls of the split; no refused one


@pytest.mark.parametrize(
    ("raw", "what"),
    [
        (b'{"embeddings": [{"values": [0.5]}]}', "sent 1 vectors for 2 inputs"),
        (b'{"embeddings": [{"values": [0.5]}, {"values": []}]}', "sent 1 vectors for 2 inputs"),
        (b'{"error": {"code": 500, "message": "boom"}}', "answered 200 with an error"),
        (b"<html>", "malformed"),
    ],
)
def test_unusable_answers_are_wire_errors(raw: bytes, what: str) -> None:
    from switchyard.core.canonical import CanonicalRequest
    from switchyard.providers.google.embed import Embedder
    from switchyard.providers.wire import WireError

    req = CanonicalRequest(kind="embedding", model="m", dialect="embeddings", prompt=["a", "b"])
    with pytest.raises(WireError, match=what):
        Embedder("gemini", "gemini").chunk(raw, 2)
    ok = Embedder("predict", "vertex").chunk(
        b'{"predictions": [{"embeddings": {"values": [1, 2], "statistics": {"token_count": 3}}},'
        b' {"embeddings": {"values": [3.5], "statistics": {"token_count": 2.0}}}]}',
        len(req.prompt or ()),
    )
    assert ok.embeddings == [[1.0, 2.0], [3.5]] and ok.usage is not None and ok.usage.prompt_tokens == 5
