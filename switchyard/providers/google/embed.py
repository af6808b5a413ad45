"""Embeddings over Google's APIs, beside the generateContent codec (``gemini.py``).

Three bodies, as google-genai's ``models.embed_content`` sends them (``_EmbedContentParameters*``):

``gemini``  the Gemini API's ``{model}:batchEmbedContents``: ``requests[]`` of ``{model:
            "models/<m>", content: {parts: [{text}]}, outputDimensionality}``; the answer
            ``embeddings[].values``, with ``usageMetadata`` only where the API reports it.
``vertex``  Vertex's ``{model}:batchEmbedContents``, which the SDK uses for Gemini embedding
            models (``gemini`` in the id): ``requests[]`` of ``{content, embedContentConfig:
            {outputDimensionality}}``; the answer ``embeddings[]`` (``statistics.token_count``
            each) and perhaps ``usageMetadata``.
``predict`` Vertex's ``{model}:predict`` for the others (text-embedding-005, ...): ``instances[]``
            of ``{content: "<text>"}`` and ``parameters.outputDimensionality``; the answer
            ``predictions[].embeddings`` with ``values`` and ``statistics.token_count``.

One request item per input, in order; the caller's ``dimensions`` is ``outputDimensionality``; no
``taskType`` (OpenAI's API has none: the model's default). Vectors come back as floats and the
gateway writes them in the caller's ``encoding_format``. Usage: the upstream's token counts where
it reports any; else none, and the gateway's own input estimate (made for admission) settles it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from switchyard.core.canonical import CanonicalRequest, Chunk, Usage
from switchyard.core.deployments import DeploymentConfig
from switchyard.providers.emulation import Emulation
from switchyard.providers.failures import message_of
from switchyard.providers.turns import refuse, text_inputs
from switchyard.providers.wire import Codec, Lanes, StreamDecoder, Wire, WireError

Style = Literal["gemini", "vertex", "predict"]
# Inputs per call: the Gemini API's batch limit, Vertex's for text-embedding models (the router
# splits more: Caps.embed_inputs).
MAX_INPUTS: dict[Style, int] = {"gemini": 100, "predict": 250}


@dataclass(frozen=True, slots=True)
class Embedder:
    style: Style
    provider: str  # the name refusals use

    def body(self, req: CanonicalRequest, model: str) -> dict[str, Any]:
        if req.user is not None:  # the embeddings dialect's one field Google's APIs lack
            raise refuse(req, "user", self.provider)
        texts = text_inputs(req, f"model {req.model} (its upstream is {self.provider})")
        dims = {"outputDimensionality": req.dimensions} if req.dimensions is not None else {}
        if self.style == "predict":
            body: dict[str, Any] = {"instances": [{"content": t} for t in texts]}
            if dims:
                body["parameters"] = dims
            return body
        if self.style == "gemini":
            name = f"models/{model}"
            return {"requests": [{"model": name, "content": {"parts": [{"text": t}]}, **dims} for t in texts]}
        config = {"embedContentConfig": dims} if dims else {}
        return {"requests": [{"content": {"parts": [{"text": t}]}, **config} for t in texts]}


    def chunk(self, raw: bytes, inputs: int) -> Chunk:
        try:
            ans = _decode(raw)
        except msgspec.DecodeError:
            raise WireError("sent a malformed embeddings answer") from None
        if ans.error is not None:
            raise WireError("answered 200 with an error", message_of({"error": ans.error}))
        got = (
            [p.embeddings for p in ans.predictions or ()] if self.style == "predict" else ans.embeddings or []
        )
        vectors = [e.values for e in got if e.values]
        if len(vectors) != inputs:
            raise WireError(f"sent {len(vectors)} vectors for {inputs} inputs in its embeddings answer")
        return Chunk(embeddings=vectors, usage=_usage(ans, got), finish_reason="stop")


def _usage(ans: _Answer, got: list[_Embedding]) -> Usage | None:
    """The upstream's input tokens (``usageMetadata``, else the per-vector statistics), or None."""
    if ans.usageMetadata is not None and ans.usageMetadata.promptTokenCount is not None:
        return Usage(prompt_tokens=ans.usageMetadata.promptTokenCount)
    counts = [
        e.statistics.token_count
        for e in got
        if e.statistics is not None and e.statistics.token_count is not None
    ]
    return Usage(prompt_tokens=round(sum(counts))) if counts else None


@dataclass(frozen=True, slots=True)
class WithEmbeddings:
    """A row's one codec: embeddings by ``embed``, everything else by the chat codec."""

    chat: Codec
    embed: Embedder

    @property
    def lanes(self) -> Lanes:
        return self.chat.lanes

    def render(
        self, req: CanonicalRequest, model: str, dep: DeploymentConfig
    ) -> tuple[dict[str, Any], Emulation]:
        if req.kind == "embedding":
            return self.embed.body(req, model), Emulation()
        return self.chat.render(req, model, dep)

    def whole(self, raw: bytes, req: CanonicalRequest) -> list[Chunk]:
        if req.kind == "embedding":
            return [self.embed.chunk(raw, len(req.prompt or ()))]
        return self.chat.whole(raw, req)

    def stream(self, req: CanonicalRequest) -> StreamDecoder:
        return self.chat.stream(req)  # embeddings never stream


def with_embeddings(row: Wire, base: str, style: Style) -> Wire:
    """``row`` with embeddings at ``base`` (the path to the model, ``{model}`` in it)."""
    method = ":predict" if style == "predict" else ":batchEmbedContents"
    return dataclasses.replace(
        row,
        codec=WithEmbeddings(row.codec, Embedder(style, row.name)),
        paths={**row.paths, ("embedding", False): base + method},
        caps=dataclasses.replace(row.caps, embed_inputs=MAX_INPUTS.get(style)),
    )


def vertex_style(model: str) -> Style:
    """Vertex's API for a Google embedding model, as google-genai picks it
    (``t_is_vertex_embed_content_model``): Gemini models batchEmbedContents, the others predict."""
    return "vertex" if "gemini" in model.rsplit("/", 1)[-1] else "predict"


class _Stats(msgspec.Struct):
    token_count: float | None = None  # google-genai's type: a float (Vertex writes an integer)


class _Embedding(msgspec.Struct):
    values: list[float] | None = None
    statistics: _Stats | None = None


class _Prediction(msgspec.Struct):
    embeddings: _Embedding


class _UsageMeta(msgspec.Struct):
    promptTokenCount: int | None = None


class _Answer(msgspec.Struct):
    embeddings: list[_Embedding] | None = None
    predictions: list[_Prediction] | None = None
    usageMetadata: _UsageMeta | None = None
    error: Any = None


_decode = msgspec.json.Decoder(_Answer).decode
