"""Bedrock's InvokeModel for embeddings models, on loopback: ``POST /model/{id}/invoke`` with
Amazon Titan text embeddings and Cohere Embed bodies, as AWS documents them (the "Amazon Titan
Embeddings G1 - Text" and "Cohere Embed models" parameter pages).

As AWS does: the request is validated against botocore's service model (InvokeModel's input
shape) and its SigV4 signature recomputed with botocore (tests/fakes/bedrock.py's checks); then
the body against the model's own parameters (an unknown key, a bad ``dimensions``, too many
texts: a 400 ValidationException). Cohere answers carry no token count: it comes in the
``X-Amzn-Bedrock-Input-Token-Count`` header, which every answer here carries. Calibrated with
boto3's ``invoke_model`` (tests/providers/test_bedrock_embed.py).

``hold``: the first requests wait (at most 5 s) until that many are in flight at once, and every
request then takes ``linger`` seconds: a fan-out's bound is reached whatever the timing, and a
fan-out without one shows more (``peak``).

    async with FakeBedrockEmbed() as aws:
        aws.script.append("ThrottlingException")
        aws.requests[-1].body, aws.peak
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from tests.fakes.bedrock import ERRORS, Seen, _check_auth, _error, read_invoke
from tests.fakes.serve import serve_app

TITAN_V2_DIMENSIONS = (256, 512, 1024)
COHERE_V4_DIMENSIONS = (256, 512, 1024, 1536)
INPUT_TYPES = ("search_document", "search_query", "classification", "clustering", "image")
EMBEDDING_TYPES = ("float", "int8", "uint8", "binary", "ubinary")
SCALE = 64  # a vector of d dimensions is d / SCALE floats here: small, and still says which d


def vector(text: str, size: int) -> list[float]:
    """A deterministic vector of the text (what a test compares the gateway's answer with)."""
    digest = hashlib.sha256(text.encode()).digest()
    return [round((digest[i % len(digest)] - 128) / 128, 6) for i in range(size)]


def tokens(text: str) -> int:
    return len(text.split())


@dataclass
class FakeBedrockEmbed:
    script: list[str] = field(default_factory=list)  # x-amzn-ErrorTypes answered to the next requests
    requests: list[Seen] = field(default_factory=list)
    hold: int = 0
    linger: float = 0.0
    token_header: bool = True
    port: int = 0
    in_flight: int = 0
    peak: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeBedrockEmbed:
        self._held = asyncio.Event()
        app = web.Application()
        app.router.add_post("/model/{model}/{op}", self._handle)
        self._runner, self.port = await serve_app(app)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.hold and not self._held.is_set():
                if self.in_flight >= self.hold:
                    self._held.set()
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._held.wait(), 5)
            await asyncio.sleep(self.linger)
            return await self._answer(request)
        finally:
            self.in_flight -= 1

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        if request.match_info["op"] != "invoke":
            return _error("ValidationException", 400, "The model does not support streaming")
        model = unquote(request.raw_path.split("/")[2])
        denied = _check_auth(request, raw)
        if denied:
            return _error(*denied)
        body, refused = read_invoke(request, raw, model, "InvokeModel")
        if refused is not None:
            return refused
        self.requests.append(Seen("InvokeModel", model, dict(request.headers), body))
        if self.script:
            kind = self.script.pop(0)
            return _error(kind, ERRORS[kind], f"fake {kind}")
        if "amazon.titan-embed-text" in model:
            answer, count = _titan(model, body)
        elif "cohere.embed" in model:
            answer, count = _cohere(model, body)
        else:
            return _error("ValidationException", 400, f"The provided model identifier is invalid: {model}")
        if isinstance(answer, str):
            return _error("ValidationException", 400, f"Malformed input request: {answer}")
        headers = {"x-amzn-requestid": "fake-request"}
        if self.token_header:
            headers["X-Amzn-Bedrock-Input-Token-Count"] = str(count)
        return web.json_response(answer, headers=headers)


def _titan(model: str, body: dict[str, Any]) -> tuple[dict[str, Any] | str, int]:
    v2 = "titan-embed-text-v2" in model
    allowed = {"inputText", "dimensions", "normalize", "embeddingTypes"} if v2 else {"inputText"}
    if extra := sorted(set(body) - allowed):
        return f"extraneous key [{extra[0]}] is not permitted", 0
    text = body.get("inputText")
    if not isinstance(text, str) or not text:
        return "inputText: expected a non-empty string", 0
    size = body.get("dimensions", 1024 if v2 else 1536)
    if v2 and size not in TITAN_V2_DIMENSIONS:
        return f"dimensions: {size} is not a valid enum value", 0
    if not isinstance(body.get("normalize", True), bool):
        return "normalize: expected type: Boolean", 0
    vec = vector(text, size // SCALE)
    answer: dict[str, Any] = {"embedding": vec, "inputTextTokenCount": tokens(text)}
    if v2:
        answer["embeddingsByType"] = {"float": vec}
    return answer, tokens(text)


def _cohere(model: str, body: dict[str, Any]) -> tuple[dict[str, Any] | str, int]:
    v4 = "embed-v4" in model
    allowed = {"texts", "images", "input_type", "truncate", "embedding_types"}
    allowed |= {"output_dimension", "max_tokens", "inputs"} if v4 else set()
    if extra := sorted(set(body) - allowed):
        return f"extraneous key [{extra[0]}] is not permitted", 0
    texts = body.get("texts")
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        return "texts: expected an array of strings", 0
    if len(texts) > 96:
        return f"texts: array size {len(texts)} is greater than 96", 0
    if any(len(t) > 2048 for t in texts):
        return "texts: a text is longer than 2048 characters", 0
    if body.get("input_type") not in INPUT_TYPES:
        return "input_type: required, one of " + ", ".join(INPUT_TYPES), 0
    if body.get("truncate", "NONE") not in ("NONE", "START", "END"):
        return "truncate: one of NONE, START, END", 0
    types = body.get("embedding_types")
    if types is not None and (not isinstance(types, list) or not set(types) <= set(EMBEDDING_TYPES)):
        return "embedding_types: expected an array of " + ", ".join(EMBEDDING_TYPES), 0
    size = body.get("output_dimension", 1536 if v4 else 1024)
    if size not in (*COHERE_V4_DIMENSIONS, 1024):
        return f"output_dimension: {size} is not a valid value", 0
    vecs = [vector(t, size // SCALE) for t in texts]
    answer: dict[str, Any] = {"id": "fake-embed-id", "texts": texts}
    if types is None:
        answer |= {"embeddings": vecs, "response_type": "embeddings_floats"}
    else:
        answer |= {"embeddings": {t: vecs for t in types if t == "float"},
                   "response_type": "embeddings_by_type"}
    return answer, sum(tokens(t) for t in texts)
