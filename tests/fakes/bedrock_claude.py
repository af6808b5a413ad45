"""Claude on Bedrock's InvokeModel, on loopback: ``/model/{id}/invoke`` and
``/invoke-with-response-stream`` in front of tests/fakes/anthropic.py's Messages API (which
validates the body with the anthropic SDK's types and answers with its models).

As AWS does: the request is validated against botocore's service model (InvokeModel /
InvokeModelWithResponseStream input shapes) and its SigV4 signature recomputed with botocore
(tests/fakes/bedrock.py's checks); the body must be an Anthropic Messages body without ``model``
and ``stream`` and with ``anthropic_version: bedrock-2023-05-31``. A stream is event-stream frames,
each ``chunk`` event carrying ``{"bytes": base64(one Anthropic event's JSON)}``, checked by
botocore's ``EventStreamBuffer`` before it is sent. Calibrated with the anthropic SDK's
``AnthropicBedrock`` client and boto3 (tests/providers/test_bedrock_claude.py).

    async with FakeBedrockClaude() as aws:      # aws.url; aws.inner is the FakeAnthropic
        aws.script.append(Invoke(error="ThrottlingException"))
"""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import aiohttp
from aiohttp import web
from botocore.eventstream import EventStreamBuffer
from botocore.validate import ParamValidator

from switchyard.providers.aws.eventstream import encode_frame
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.bedrock import _MODEL, ERRORS, Seen, _check_auth, _error, read_invoke
from tests.fakes.serve import serve_app

# What AWS documents, and what the anthropic SDK's Bedrock client sends by default (its own API
# version): either is an anthropic_version Bedrock takes.
VERSIONS = ("bedrock-2023-05-31", "2023-06-01", "2026-10-21")
OPERATIONS = {"invoke": "InvokeModel", "invoke-with-response-stream": "InvokeModelWithResponseStream",
              "count-tokens": "CountTokens"}


@dataclass
class Invoke:
    """What Bedrock itself does to the next request (the content is the inner fake's)."""

    error: str | None = None  # an x-amzn-ErrorType answered before any answer
    exception: str | None = None  # streams: an exception frame ...
    exception_after: int = 0  # ... after this many chunk events


@dataclass
class FakeBedrockClaude:
    inner: FakeAnthropic = field(default_factory=FakeAnthropic)
    script: list[Invoke] = field(default_factory=list)
    requests: list[Seen] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeBedrockClaude:
        await self.inner.__aenter__()
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_post("/model/{model}/{op}", self._handle)
        self._runner, self.port = await serve_app(app)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()
        await self._session.close()
        await self.inner.__aexit__(*exc)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        op = OPERATIONS.get(request.match_info["op"])
        if op is None:
            return _error("UnknownOperationException", 404, "unknown operation")
        model = unquote(request.raw_path.split("/")[2])
        denied = _check_auth(request, raw)
        if denied:
            return _error(*denied)
        if op == "CountTokens":
            return await self._count(model, raw, dict(request.headers))
        body, refused = read_invoke(request, raw, model, op)
        if refused is not None:
            return refused
        if problem := _invoke_problem(body):
            return _error("ValidationException", 400, f"Malformed input request: {problem}")
        self.requests.append(Seen(op, model, dict(request.headers), body))
        r = self.script.pop(0) if self.script else Invoke()
        if r.error is not None:
            return _error(r.error, ERRORS[r.error], f"fake {r.error}")
        inner = {k: v for k, v in body.items() if k not in ("anthropic_version", "anthropic_beta")}
        stream = op == "InvokeModelWithResponseStream"
        async with self._session.post(
            self.inner.url + "/v1/messages",
            json={"model": model, **inner, **({"stream": True} if stream else {})},
            headers={"x-api-key": self.inner.key, "anthropic-version": "2023-06-01"},
        ) as up:
            if up.status != 200:  # the model's own refusal: Bedrock's ValidationException
                return _error("ValidationException", 400, (await up.text())[:200])
            if not stream:
                return web.json_response(await up.json())
            return await self._stream(request, await up.text(), r)

    async def _count(self, model: str, raw: bytes, headers: dict[str, str]) -> web.StreamResponse:
        """CountTokens (rest-json: the InvokeModel body is a blob, base64 in the JSON), answered
        with the inner fake's own count of that body."""
        try:
            req = json.loads(raw)
            invoke = req["input"]["invokeModel"]
            body = json.loads(base64.b64decode(invoke["body"], validate=True))
        except (ValueError, KeyError, TypeError):
            return _error("ValidationException", 400, "Malformed input request: input.invokeModel.body")
        report = ParamValidator().validate({"modelId": model, "input": {"invokeModel": {"body": b""}}},
                                           _MODEL.operation_model("CountTokens").input_shape)
        assert not report.has_errors(), report.generate_report()
        if problem := _invoke_problem(body):
            return _error("ValidationException", 400, f"Malformed input request: {problem}")
        self.requests.append(Seen("CountTokens", model, headers, body))
        envelope = ("anthropic_version", "anthropic_beta", "max_tokens")
        inner = {k: v for k, v in body.items() if k not in envelope}
        async with self._session.post(
            self.inner.url + "/v1/messages/count_tokens", json={"model": model, **inner},
            headers={"x-api-key": self.inner.key, "anthropic-version": "2023-06-01"},
        ) as up:
            if up.status != 200:
                return _error("ValidationException", 400, (await up.text())[:200])
            return web.json_response({"inputTokens": (await up.json())["input_tokens"]})

    async def _stream(self, request: web.Request, sse: str, r: Invoke) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"content-type": "application/vnd.amazon.eventstream", "x-amzn-requestid": "fake-request"}
        )
        await resp.prepare(request)
        checker = EventStreamBuffer()

        async def send(headers: dict[str, str], payload: bytes) -> None:
            frame = encode_frame({**headers, ":content-type": "application/json"}, payload)
            checker.add_data(frame)
            checked = list(checker)  # botocore's decoder reads it back (CRCs included)
            assert len(checked) == 1 and checked[0].payload == payload
            await resp.write(frame)
            await asyncio.sleep(0)

        events = [line[6:] for line in sse.splitlines() if line.startswith("data: ")]
        for n, data in enumerate(events):
            if r.exception is not None and n == r.exception_after:
                await send({":message-type": "exception", ":exception-type": r.exception},
                           json.dumps({"message": f"fake {r.exception}"}).encode())
                break
            chunk = {"bytes": base64.b64encode(data.encode()).decode()}
            await send({":message-type": "event", ":event-type": "chunk"}, json.dumps(chunk).encode())
        await resp.write_eof()
        return resp


def _invoke_problem(body: Any) -> str | None:
    """What Bedrock refuses in an InvokeModel body for Claude (None: nothing)."""
    if not isinstance(body, dict):
        return "body is not an object"
    if "model" in body:
        return "extraneous key [model] is not permitted"
    if "stream" in body:
        return "extraneous key [stream] is not permitted"
    if body.get("anthropic_version") not in VERSIONS:
        return f"anthropic_version {body.get('anthropic_version')!r}"
    if not isinstance(body.get("anthropic_beta", []), list):
        return "anthropic_beta must be an array of strings"
    return None
