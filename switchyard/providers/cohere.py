"""Cohere's Embed: the body and answer its own API (``POST /v2/embed``) and Cohere on Bedrock's
InvokeModel share, and the native embeddings row of a ``cohere`` deployment.

Body: ``{"texts": [...], "input_type": ..., "embedding_types": ["float"]}`` (the native API adds
``model``); at most ``MAX_TEXTS`` texts a call (the router splits more: ``Caps.embed_inputs``).
``input_type`` is required by Embed v3 and later; the gateway sends ``search_document`` (what
LiteLLM sends) unless the caller's own ``input_type`` field passes (``allow_extra_params``).
Answer: ``{"embeddings": {"float": [[...]]}}`` when embedding types were asked, the older
``{"embeddings": [[...]]}`` otherwise; the native API bills ``meta.billed_units.input_tokens``.

Chat stays on Cohere's OpenAI-compatible API (rows.py); a deployment whose model is an Embed model
(``embed-...``) gets this row instead. Its paths sit at the API's root: a base_url of the
compatibility API (``.../compatibility/v1``, the default) is read as that root.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from switchyard.core.canonical import CanonicalRequest, Chunk, RequestKind, Usage
from switchyard.core.deployments import DeploymentConfig
from switchyard.dialects import passthrough
from switchyard.providers.emulation import Emulation
from switchyard.providers.turns import text_inputs
from switchyard.providers.wire import BEARER, NO_LANES, Caps, Wire, WireError

MAX_TEXTS = 96  # texts per call: Cohere's API reference and Bedrock's Cohere Embed parameters
INPUT_TYPE = "search_document"
COMPAT = "/compatibility/v1"
PATHS: dict[tuple[RequestKind, bool], str] = {("embedding", False): "/v2/embed"}
CAPS = Caps(n=False, chat_n=False, best_of=False, prompts=False, embed_inputs=MAX_TEXTS)


def embed_body(req: CanonicalRequest, dep: DeploymentConfig, who: str) -> dict[str, Any]:
    """The Embed body (without ``model``): the gateway's fields, then the caller's own vendor
    fields the deployment allows (``input_type``, ``truncate``), never over the gateway's."""
    body: dict[str, Any] = {"texts": text_inputs(req, who), "embedding_types": ["float"]}
    if req.extra:
        body.update({k: v for k, v in passthrough.vendor_fields(req.extra, dep.allow_extra_params).items()
                     if k not in body})
    body.setdefault("input_type", INPUT_TYPE)
    return body


class _Units(msgspec.Struct):
    input_tokens: float | None = None


class _Meta(msgspec.Struct):
    billed_units: _Units | None = None


class _Answer(msgspec.Struct):
    embeddings: dict[str, Any] | list[list[float]] | None = None
    meta: _Meta | None = None
    # Titan (Bedrock InvokeModel): one vector and its token count
    embedding: list[float] | None = None
    inputTextTokenCount: int | None = None


decode_answer = msgspec.json.Decoder(_Answer, strict=False).decode


def vectors_of(ans: _Answer, inputs: int) -> list[list[float]]:
    """The float vectors of an Embed answer, one per input (a ``WireError`` otherwise)."""
    got = ans.embeddings
    vectors = got.get("float") if isinstance(got, dict) else got
    if not isinstance(vectors, list) or not all(isinstance(v, list) for v in vectors):
        raise WireError("sent an embeddings answer without float vectors")
    if len(vectors) != inputs:
        raise WireError(f"sent {len(vectors)} vectors for {inputs} inputs")
    try:
        return [[float(x) for x in v] for v in vectors]
    except (TypeError, ValueError):
        raise WireError("sent an embeddings answer without float vectors") from None


def read(raw: bytes) -> _Answer:
    try:
        return decode_answer(raw)
    except msgspec.DecodeError:
        raise WireError("sent a malformed embeddings answer") from None


class CohereEmbedCodec:
    """Cohere's own ``/v2/embed``."""

    __slots__ = ()
    lanes = NO_LANES

    def render(self, req: CanonicalRequest, model: str,
               dep: DeploymentConfig) -> tuple[dict[str, Any], Emulation]:
        body = {"model": model, **embed_body(req, dep, f"Cohere's {model}")}
        if req.dimensions is not None:  # embed-v4 and later; Cohere refuses it for the others
            body["output_dimension"] = req.dimensions
        return body, Emulation()

    def whole(self, raw: bytes, req: CanonicalRequest) -> list[Chunk]:
        ans = read(raw)
        vectors = vectors_of(ans, len(req.prompt or ()))
        units = ans.meta.billed_units if ans.meta is not None else None
        usage = (Usage(prompt_tokens=int(units.input_tokens))
                 if units is not None and units.input_tokens is not None else None)
        return [Chunk(embeddings=vectors, usage=usage, finish_reason="stop")]

    def stream(self, req: CanonicalRequest) -> Any:
        raise WireError("has no streamed embeddings")  # never asked: embeddings do not stream


def is_embed_model(model: str | None) -> bool:
    return model is not None and model.startswith("embed-")


def _root(url: str) -> str:
    url = url.rstrip("/")
    return url.removesuffix(COMPAT)


EMBED_ROW = Wire("cohere", CohereEmbedCodec(), PATHS, auth=BEARER, caps=CAPS, base=_root)


def cohere_row(chat: Wire) -> Callable[[DeploymentConfig], Wire]:
    """The row of a ``cohere`` deployment: its model decides (Embed models: ``/v2/embed``)."""

    def row(dep: DeploymentConfig) -> Wire:
        return EMBED_ROW if is_embed_model(dep.model) else chat
    return row
