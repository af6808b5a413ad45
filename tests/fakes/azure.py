"""A real HTTP server on loopback that plays Azure OpenAI chat completions: the classic
``/openai/deployments/{deployment}/chat/completions?api-version=`` and the v1 API at
``/openai/v1/chat/completions``, the key in ``api-key``; Azure's quirks: a stream's first event
has ``choices: []`` with ``prompt_filter_results``, and a filtered answer ends with
``content_filter``; a deployment of a reasoning model (by its name) refuses ``max_tokens`` and
changed sampling values as the service does (openai_rules.py). Every answer and chunk is validated
with the ``openai`` SDK's own models before
it is sent; tests/providers/test_azure.py drives it with ``openai.AsyncAzureOpenAI`` (calibration).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.fakes.openai_rules import reasoning_refusal
from tests.fakes.serve import serve_app

_FILTERS = {"hate": {"filtered": False, "severity": "safe"}}
_PROMPT_FILTER = [{"prompt_index": 0, "content_filter_results": _FILTERS}]


@dataclass
class Seen:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeAzure:
    key: str = "azure-key-1"
    text: str = "Hello from Azure"
    filtered: bool = False  # the answer ends with content_filter
    requests: list[Seen] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeAzure:
        app = web.Application()
        app.router.add_post("/openai/deployments/{deployment}/chat/completions", self._classic)
        app.router.add_post("/openai/v1/chat/completions", self._v1)
        self._runner, self.port = await serve_app(app, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()

    @staticmethod
    def _error(status: int, code: str, message: str) -> web.Response:
        return web.json_response({"error": {"code": code, "message": message}}, status=status)

    async def _classic(self, request: web.Request) -> web.StreamResponse:
        if "api-version" not in request.query:
            return self._error(404, "404", "Resource not found")
        return await self._answer(request, request.match_info["deployment"])

    async def _v1(self, request: web.Request) -> web.StreamResponse:
        if "api-version" in request.query:
            return self._error(400, "BadRequest", "api-version is not allowed on the v1 API")
        return await self._answer(request, None)

    async def _answer(self, request: web.Request, deployment: str | None) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(Seen(request.path, dict(request.query), dict(request.headers), body))
        if request.headers.get("api-key") != self.key:
            return self._error(401, "401", "Access denied due to invalid subscription key.")
        model = deployment or body.get("model")
        refusal = reasoning_refusal(str(model), body)  # a deployment of a reasoning model
        if refusal is not None:
            return web.json_response({"error": refusal}, status=400)
        finish = "content_filter" if self.filtered else "stop"
        words = self.text.split(" ")
        pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
        usage = {"prompt_tokens": 5, "completion_tokens": len(pieces), "total_tokens": 5 + len(pieces)}
        if not body.get("stream"):
            out = {"id": "chatcmpl-az", "object": "chat.completion", "created": 1, "model": model,
                   "prompt_filter_results": _PROMPT_FILTER,
                   "choices": [{"index": 0, "finish_reason": finish, "content_filter_results": _FILTERS,
                                "message": {"role": "assistant", "content": self.text}}], "usage": usage}
            ChatCompletion.model_validate(out)
            return web.json_response(out)
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        # (Azure sends "object": "" here; the SDK's model wants the literal, and parses either)
        chunks: list[dict[str, Any]] = [{"id": "", "object": "chat.completion.chunk", "created": 0,
                                         "model": "", "choices": [], "prompt_filter_results": _PROMPT_FILTER}]
        for j, p in enumerate(pieces):
            delta = {"content": p, **({"role": "assistant"} if j == 0 else {})}
            chunks.append({"id": "chatcmpl-az", "object": "chat.completion.chunk", "created": 1,
                           "model": model, "choices": [{"index": 0, "delta": delta,
                                        "finish_reason": finish if j == len(pieces) - 1 else None,
                                        "content_filter_results": _FILTERS}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({"id": "chatcmpl-az", "object": "chat.completion.chunk", "created": 1,
                           "model": model, "choices": [], "usage": usage})
        for c in chunks:
            ChatCompletionChunk.model_validate(c)
            await resp.write(b"data: " + json.dumps(c).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
