"""Claude on Vertex AI, on loopback: the anthropic publisher's ``:rawPredict`` /
``:streamRawPredict`` envelope (the model in the path, ``anthropic_version`` in the body, a Google
OAuth bearer token) in front of tests/fakes/anthropic.py's Messages API, which validates the body
with the anthropic SDK's own types and answers with its models. Calibrated with the SDK's
``AnthropicVertex`` client (tests/providers/test_gemini_fake.py).

    async with FakeVertexClaude(tokens) as v:   # v.url == "http://127.0.0.1:PORT"
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import aiohttp
from aiohttp import web

from tests.fakes.anthropic import FakeAnthropic, Seen
from tests.fakes.serve import serve_app

# What Google documents, and what the anthropic SDK's Vertex client sends by default (its own API
# version): either is an anthropic_version Vertex takes.
VERSIONS = ("vertex-2023-10-16", "2023-06-01", "2026-10-21")


@dataclass
class FakeVertexClaude:
    tokens: set[str]  # bearer tokens accepted (FakeTokenServer issues them)
    inner: FakeAnthropic = field(default_factory=FakeAnthropic)
    requests: list[Seen] = field(default_factory=list)  # as Vertex received them
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeVertexClaude:
        await self.inner.__aenter__()
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_post(
            "/v1/projects/{project}/locations/{location}/publishers/anthropic/models/{tail}", self._handle
        )
        self._runner, self.port = await serve_app(app)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()
        await self._session.close()
        await self.inner.__aexit__(*exc)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        tail = unquote(request.match_info["tail"])
        model, _, method = tail.rpartition(":")
        auth = request.headers.get("authorization", "")
        if not auth.startswith("Bearer ") or auth[7:] not in self.tokens:
            return _error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
        raw = await request.read()
        body: dict[str, Any] = json.loads(raw)
        self.requests.append(Seen(request.path, dict(request.headers), body, raw))
        if model == "count-tokens":  # the token count: the model in the body, as the SDK sends it
            problem = (
                "count-tokens: model is required in the body"
                if "model" not in body
                else f"anthropic_version {body.get('anthropic_version')!r}"
                if body.get("anthropic_version") not in VERSIONS
                else None
            )
            if problem:
                return _error(400, "INVALID_ARGUMENT", problem)
            inner = {k: v for k, v in body.items() if k != "anthropic_version"}
            return await self._forward(request, "/v1/messages/count_tokens", inner)
        problem = (
            "model goes in the path, not the body"
            if "model" in body
            else f"anthropic_version {body.get('anthropic_version')!r}"
            if body.get("anthropic_version") not in VERSIONS
            else f"{method} with stream={body.get('stream')!r}"
            if method not in ("rawPredict", "streamRawPredict")
            or (method == "streamRawPredict") != bool(body.get("stream"))
            else None
        )
        if problem:
            return _error(400, "INVALID_ARGUMENT", problem)
        inner = {k: v for k, v in body.items() if k != "anthropic_version"}
        return await self._forward(request, "/v1/messages", {"model": model, **inner})

    async def _forward(self, request: web.Request, path: str, body: dict[str, Any]) -> web.StreamResponse:
        async with self._session.post(
            self.inner.url + path,
            json=body,
            headers={"x-api-key": self.inner.key, "anthropic-version": "2023-06-01"},
        ) as up:
            resp = web.StreamResponse(
                status=up.status, headers={"content-type": up.headers.get("content-type", "application/json")}
            )
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": status, "message": message, "status": code}}, status=status)
