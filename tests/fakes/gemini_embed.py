"""The embedding endpoints of tests/fakes/gemini.py's FakeGemini: the Gemini API's
``{m}:batchEmbedContents`` and Vertex's ``{m}:batchEmbedContents`` (Gemini embedding models) and
``{m}:predict`` (the text-embedding models), as google-genai's ``models.embed_content`` calls them.

Requests are checked against google-genai's own models (``types.Content``,
``types.EmbedContentConfig``; unknown fields refused); every answer is read back through the SDK's
own response converter (``_EmbedContentResponse_from_vertex`` for Vertex) and validated as a
``types.EmbedContentResponse`` with warnings as errors before it is sent.
``tests/providers/test_gemini_fake.py`` calibrates them with google-genai's ``Client``.

Vectors are ``tests.fakes.upstream.fake_vector`` of the text, ``outputDimensionality`` long (8
unless asked); an input's token count is its number of words.
"""

from __future__ import annotations

import warnings
from typing import Any

from google.genai import models as sdk_models
from google.genai import types

from tests.fakes.upstream import fake_vector

METHODS = ("batchEmbedContents", "predict")
_ITEM_GEMINI = {"model", "content", "taskType", "title", "outputDimensionality"}


def _valid(model: type[Any], obj: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.model_validate(obj)


def texts_of(
    method: str, vertex: bool, model: str, body: dict[str, Any]
) -> tuple[list[str], int | None] | str:
    """The texts to embed and the dimensionality asked for, or what google-genai's models refuse."""
    try:
        if method == "predict":
            if not vertex or set(body) - {"instances", "parameters"}:
                return f"Invalid JSON payload received. Unknown name in {sorted(body)}"
            params = body.get("parameters") or {}
            if set(params) - {"outputDimensionality", "autoTruncate"}:
                return f"unknown parameters {sorted(params)}"
            texts = []
            for inst in body.get("instances") or []:
                if set(inst) - {"content", "task_type", "title", "mimeType"} or not isinstance(
                    inst.get("content"), str
                ):
                    return f"instance {inst!r} is not a text instance"
                texts.append(inst["content"])
            return texts, params.get("outputDimensionality")
        if set(body) != {"requests"}:
            return f"Invalid JSON payload received. Unknown name in {sorted(body)}"
        texts, dims = [], set()
        for item in body["requests"]:
            if vertex:
                if set(item) - {"content", "embedContentConfig"}:
                    return f"Unknown name in request {sorted(item)}"
                config = item.get("embedContentConfig") or {}
                _valid(types.EmbedContentConfig, config)
            else:
                if set(item) - _ITEM_GEMINI:
                    return f"Unknown name in request {sorted(item)}"
                if item.get("model") != f"models/{model}":
                    return f"request model {item.get('model')!r} differs from the path's models/{model}"
                config = {k: v for k, v in item.items() if k not in ("model", "content")}
                _valid(types.EmbedContentConfig, config)
            _valid(types.Content, item["content"])
            parts = item["content"]["parts"]
            if len(parts) != 1 or not isinstance(parts[0].get("text"), str):
                return "this fake embeds one text part per request"
            texts.append(parts[0]["text"])
            dims.add(config.get("outputDimensionality"))
        if len(dims) > 1:
            return "outputDimensionality differs between the requests"
        return texts, dims.pop() if dims else None
    except Exception as e:  # pydantic's ValidationError, or a warning turned error
        return str(e)[:500]


def answer(method: str, vertex: bool, texts: list[str], dims: int | None, *, usage: bool) -> dict[str, Any]:
    """The upstream's answer, checked as google-genai reads it. ``usage``: the Gemini API answer
    carries ``usageMetadata`` (whether it does is not documented; the SDK reads it if so)."""
    vecs = [fake_vector(t, dims or 8) for t in texts]
    words = [len(t.split()) for t in texts]
    out: dict[str, Any]
    if method == "predict":
        out = {
            "predictions": [
                {"embeddings": {"values": v, "statistics": {"token_count": n, "truncated": False}}}
                for v, n in zip(vecs, words, strict=True)
            ],
            "metadata": {"billableCharacterCount": sum(len(t) for t in texts)},
        }
        api = "PREDICT"
    elif vertex:
        out = {
            "embeddings": [
                {"values": v, "statistics": {"token_count": n}} for v, n in zip(vecs, words, strict=True)
            ]
        }
        api = "BATCH_EMBED_CONTENTS"
    else:
        out = {"embeddings": [{"values": v} for v in vecs]}
        if usage:
            out["usageMetadata"] = {"promptTokenCount": sum(words), "totalTokenCount": sum(words)}
        api = ""
    read = (
        sdk_models._EmbedContentResponse_from_vertex(out, None, {"embedding_api_type": api})
        if vertex
        else out
    )
    _valid(types.EmbedContentResponse, read)
    return out
