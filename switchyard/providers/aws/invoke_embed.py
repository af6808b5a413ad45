"""Embeddings on Bedrock's InvokeModel (``POST /model/{id}/invoke``): a bedrock deployment whose
model is an Amazon Titan text embeddings model (``amazon.titan-embed-...``) or a Cohere Embed model
(``cohere.embed-...``) gets this row; auth and error statuses are the Converse row's.

Titan (AWS's "Amazon Titan Embeddings G1 - Text" parameters page): ``{"inputText": "...",
"dimensions": 256|512|1024, "normalize": true}`` (``dimensions`` and ``normalize`` only on
``titan-embed-text-v2``; G1 takes ``inputText`` alone) -> ``{"embedding": [...],
"inputTextTokenCount": N}``. One text a call: the router sends one call per input
(``Caps.embed_inputs``, routing/fanout.py) and merges them in input order, usage summed.

Cohere Embed (AWS's "Cohere Embed models" page): the Embed body of providers/cohere.py without
``model`` (the path names it), at most 96 texts a call (the router splits more), ``dimensions`` as
``output_dimension`` on embed-v4 only. Its answer carries no token count: Bedrock reports it in the
``X-Amzn-Bedrock-Input-Token-Count`` header (``Wire.tokens_header``); without the header the
gateway's own estimate of the prompt stands.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from switchyard.core.canonical import CanonicalRequest, Chunk, RequestKind, Usage
from switchyard.core.deployments import DeploymentConfig
from switchyard.core.errors import InvalidRequest
from switchyard.providers.cohere import MAX_TEXTS, embed_body, read, vectors_of
from switchyard.providers.emulation import Emulation
from switchyard.providers.turns import text_inputs
from switchyard.providers.wire import NO_LANES, Wire, WireError

PATHS: dict[tuple[RequestKind, bool], str] = {("embedding", False): "/model/{model}/invoke"}
TOKENS_HEADER = "x-amzn-bedrock-input-token-count"
TITAN_V2_DIMENSIONS = (256, 512, 1024)
COHERE_V4_DIMENSIONS = (256, 512, 1024, 1536)


def family(model: str | None) -> str | None:
    """``titan`` or ``cohere`` for the embeddings models this codec speaks to (a base model id,
    a cross-region inference profile such as ``us.cohere.embed-v4:0``, or an ARN ending in
    one), else None."""
    name = (model or "").rsplit("/", 1)[-1]
    if "amazon.titan-embed" in name:
        return "titan"
    if "cohere.embed" in name:
        return "cohere"
    return None


def _dimensions(req: CanonicalRequest, model: str, allowed: tuple[int, ...]) -> int:
    d = req.dimensions
    assert d is not None
    if not allowed:
        raise InvalidRequest(f"dimensions: {model} has a fixed vector size (dimensions is not accepted)",
                             param="dimensions")
    if d not in allowed:
        raise InvalidRequest(f"dimensions must be one of {', '.join(map(str, allowed))} for {model} "
                             f"(got {d})", param="dimensions")
    return d


class InvokeEmbedCodec:
    """Stateless; the model named in the path decides the body."""

    __slots__ = ()
    lanes = NO_LANES

    def render(self, req: CanonicalRequest, model: str,
               dep: DeploymentConfig) -> tuple[dict[str, Any], Emulation]:
        kind = family(model)
        body: dict[str, Any]
        if kind == "titan":
            texts = text_inputs(req, f"Bedrock's {model}")
            if len(texts) != 1:  # the router sends one a call (Caps.embed_inputs)
                raise InvalidRequest(f"input: {model} embeds one text a call", param="input")
            v2 = "titan-embed-text-v2" in model
            body = {"inputText": texts[0]}
            if req.dimensions is not None:
                body["dimensions"] = _dimensions(req, model, TITAN_V2_DIMENSIONS if v2 else ())
            if v2:
                body["normalize"] = True  # unit vectors, as OpenAI's (Titan's default too)
        elif kind == "cohere":
            body = embed_body(req, dep, f"Bedrock's {model}")
            if req.dimensions is not None:
                v4 = "embed-v4" in model
                body["output_dimension"] = _dimensions(req, model, COHERE_V4_DIMENSIONS if v4 else ())
        else:
            raise InvalidRequest(f"model {req.model}: Bedrock model {model} is not an embeddings model "
                                 "this gateway speaks to (amazon.titan-embed-*, cohere.embed-*)",
                                 param="model")
        return body, Emulation()

    def whole(self, raw: bytes, req: CanonicalRequest) -> list[Chunk]:
        ans = read(raw)
        inputs = len(req.prompt or ())
        if ans.embedding is not None:  # Titan
            if inputs != 1:
                raise WireError(f"sent 1 vector for {inputs} inputs")
            n = ans.inputTextTokenCount
            return [Chunk(embeddings=[[float(x) for x in ans.embedding]], finish_reason="stop",
                          usage=Usage(prompt_tokens=n) if n is not None else None)]
        return [Chunk(embeddings=vectors_of(ans, inputs), finish_reason="stop")]  # usage: the header

    def stream(self, req: CanonicalRequest) -> Any:
        raise WireError("has no streamed embeddings")  # never asked: embeddings do not stream


INVOKE_EMBED = InvokeEmbedCodec()


def embed_row(converse: Wire, model: str | None) -> Wire:
    """The Converse row (auth, statuses) with InvokeModel's path and the embeddings codec."""
    one_a_call = family(model) == "titan"
    caps = dataclasses.replace(converse.caps, embed_inputs=1 if one_a_call else MAX_TEXTS)
    return dataclasses.replace(converse, codec=INVOKE_EMBED, paths=PATHS, caps=caps,
                               tokens_header=TOKENS_HEADER)
