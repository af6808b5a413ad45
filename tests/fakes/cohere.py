"""Cohere's own Embed API (``POST /v2/embed``) on loopback, as its API reference documents it:
``Authorization: Bearer KEY``; ``model``, ``input_type`` (required for v3 and later), ``texts`` (at
most 96), ``embedding_types``, ``output_dimension`` (embed-v4 only), ``truncate``; the answer
``{"id", "embeddings": {"float": [[...]]}, "texts", "meta": {"billed_units": {"input_tokens"}},
"response_type": "embeddings_by_type"}``, validated with the cohere SDK's own model
(``EmbedByTypeResponse``) before it is sent. Errors are ``{"message": ...}`` with the status.
Calibrated with ``cohere.ClientV2`` (tests/providers/test_cohere_embed.py).

    async with FakeCohere() as co:        # co.url: what ClientV2(base_url=...) takes
        co.script.append(429)
        co.requests[-1]                   # the JSON bodies received
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from cohere import EmbedByTypeResponse

from tests.fakes.bedrock_embed import EMBEDDING_TYPES, INPUT_TYPES, SCALE, tokens, vector
from tests.fakes.serve import serve_app

KEY = "co-fake-key"
V4_DIMENSIONS = (256, 512, 1024, 1536)
_FIELDS = {"model", "input_type", "texts", "images", "inputs", "embedding_types", "output_dimension",
           "max_tokens", "truncate", "priority"}


@dataclass
class FakeCohere:
    script: list[int] = field(default_factory=list)  # statuses answered to the next requests
    requests: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeCohere:
        app = web.Application()
        app.router.add_post("/v2/embed", self._embed)
        self._runner, self.port = await serve_app(app)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()

    async def _embed(self, request: web.Request) -> web.Response:
        if request.headers.get("authorization") != f"Bearer {KEY}":
            return _error(401, "invalid api token")
        try:
            body = json.loads(await request.read())
        except ValueError:
            return _error(400, "invalid request: body is not JSON")
        self.requests.append(body)
        if self.script:
            status = self.script.pop(0)
            return _error(status, f"fake {status}")
        problem = _check(body)
        if problem:
            return _error(400, f"invalid request: {problem}")
        v4 = body["model"].startswith("embed-v4")
        size = body.get("output_dimension", 1536 if v4 else 1024)
        texts = body["texts"]
        vecs = [vector(t, size // SCALE) for t in texts]
        types = body.get("embedding_types") or ["float"]
        answer = {"id": "fake-embed-id", "embeddings": {t: vecs for t in types if t == "float"},
                  "texts": texts,
                  "meta": {"api_version": {"version": "2"},
                           "billed_units": {"input_tokens": sum(tokens(t) for t in texts)}},
                  "response_type": "embeddings_by_type"}
        EmbedByTypeResponse.model_validate(answer)  # the SDK's own model reads it
        return web.json_response(answer)


def _check(body: dict[str, Any]) -> str | None:
    if extra := sorted(set(body) - _FIELDS):
        return f"unknown field: parameter {extra[0]} is not a valid field"
    model = body.get("model")
    if not isinstance(model, str) or not model.startswith("embed-"):
        return f"model {model!r} is not an embed model"
    texts = body.get("texts")
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        return "texts must be a non-empty array of strings"
    if len(texts) > 96:
        return f"too many texts: {len(texts)} > 96"
    if body.get("input_type") not in INPUT_TYPES:
        return "input_type is required for embed v3 and later: one of " + ", ".join(INPUT_TYPES)
    types = body.get("embedding_types")
    if types is not None and (not isinstance(types, list) or not set(types) <= set(EMBEDDING_TYPES)):
        return "embedding_types: one or more of " + ", ".join(EMBEDDING_TYPES)
    if "output_dimension" in body and (not model.startswith("embed-v4")
                                       or body["output_dimension"] not in V4_DIMENSIONS):
        return "output_dimension is only available for embed-v4 and newer: 256, 512, 1024, 1536"
    return None


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"message": message}, status=status)
