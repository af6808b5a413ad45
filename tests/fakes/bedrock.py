"""A real HTTP server on loopback that plays AWS Bedrock Runtime's Converse and ConverseStream,
faithful where the gateway can go wrong:

- every request is validated against botocore's own service model for bedrock-runtime
  (``ParamValidator`` on the operation's input shape; a bad body is a 400 ValidationException);
- its SigV4 signature is recomputed with botocore's ``SigV4Auth`` over the headers it names and
  the exact body received (a wrong one is a 403 InvalidSignatureException); a Bedrock API key
  may be sent as Bearer instead;
- streamed answers are event-stream frames, each checked by botocore's ``EventStreamBuffer``
  before it is sent; ``metadata`` (the usage) follows ``messageStop`` as on AWS; errors before a
  stream are JSON with an ``x-amzn-ErrorType`` header;
- Claude's thinking (``additionalModelRequestFields.thinking``) as Bedrock gates it: refused by a
  Claude model that does not think and below Claude's budget rules; asked for, the answer opens
  with a ``reasoningContent`` block (text and signature; streamed as ``reasoningContent`` deltas).

``tests/providers/test_bedrock_fake.py`` calibrates it with boto3's own bedrock-runtime client.

    async with FakeBedrock() as aws:            # aws.url == "http://127.0.0.1:PORT"
        aws.script.append(Reply(error="ThrottlingException"))
        aws.requests[-1].body
"""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer
from botocore.loaders import Loader
from botocore.model import ServiceModel
from botocore.validate import ParamValidator

from switchyard.providers.aws.eventstream import encode_frame
from tests.fakes.serve import serve_app

ACCESS_KEY, SECRET_KEY = "AKIDFAKEBEDROCK", "fake/secret+key"
API_KEY = "bedrock-api-key-fake"
REGION = "us-east-1"
ERRORS = {
    "ThrottlingException": 429,
    "ModelNotReadyException": 429,
    "ValidationException": 400,
    "AccessDeniedException": 403,
    "ModelErrorException": 424,
    "InternalServerException": 500,
    "ServiceUnavailableException": 503,
    "ResourceNotFoundException": 404,
}
# Claude models that think (Anthropic's extended-thinking list), found in a model id or an ARN.
THINKING_CLAUDE = ("anthropic.claude-3-7-sonnet", "anthropic.claude-sonnet-4", "anthropic.claude-opus-4",
                   "anthropic.claude-haiku-4-5")
SIGNATURE = "EqQBCkYIBxgCKkBfakesignature"
_MODEL = ServiceModel(Loader().load_service_model("bedrock-runtime", "service-2"), "bedrock-runtime")


@dataclass
class Reply:
    text: str = "Hello from Bedrock"
    tools: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (name, input) toolUse blocks
    stop: str | None = None  # stopReason; default end_turn, or tool_use with tools
    usage: dict[str, int] = field(default_factory=lambda: {"inputTokens": 7, "outputTokens": 3})
    error: str | None = None  # an x-amzn-ErrorType answered before any answer (HTTP error)
    exception: str | None = None  # streams: an exception frame ...
    exception_after: int = 0  # ... after this many content events
    metadata: bool = True  # streams: send the metadata event after messageStop
    reasoning: str = "Let me think about it"  # reasoningContent, when thinking is asked for


@dataclass
class Seen:
    operation: str
    model: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeBedrock:
    default: Reply = field(default_factory=Reply)
    script: list[Reply] = field(default_factory=list)
    requests: list[Seen] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeBedrock:
        app = web.Application()
        app.router.add_post("/model/{model}/{op}", self._handle)
        self._runner, self.port = await serve_app(app)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        op = {"converse": "Converse", "converse-stream": "ConverseStream"}.get(request.match_info["op"])
        if op is None:
            return _error("UnknownOperationException", 404, "unknown operation")
        # The model id is one percent-encoded path segment (slashes of an ARN included).
        model = unquote(request.raw_path.split("/")[2])
        denied = _check_auth(request, raw)
        if denied:
            return _error(*denied)
        try:
            body = json.loads(raw)
        except ValueError:
            return _error("SerializationException", 400, "body is not JSON")
        report = ParamValidator().validate(
            {"modelId": model, **_as_params(body)}, _MODEL.operation_model(op).input_shape
        )
        if report.has_errors():
            return _error("ValidationException", 400, report.generate_report())
        thinking = (body.get("additionalModelRequestFields") or {}).get("thinking")
        if thinking is not None and (refused := _check_thinking(model, thinking, body)) is not None:
            return _error("ValidationException", 400, refused)
        self.requests.append(Seen(op, model, dict(request.headers), body))
        r = self.script.pop(0) if self.script else self.default
        if r.error is not None:
            return _error(r.error, ERRORS[r.error], f"fake {r.error}")
        stop = r.stop or ("tool_use" if r.tools else "end_turn")
        thought = r.reasoning if thinking is not None and thinking.get("type") == "enabled" else ""
        if op == "Converse":
            content: list[dict[str, Any]] = (
                [{"reasoningContent": {"reasoningText": {"text": thought, "signature": SIGNATURE}}}]
                if thought else [])
            content += [{"text": r.text}] if r.text else []
            content += [
                {"toolUse": {"toolUseId": f"tooluse_{i}", "name": n, "input": a}}
                for i, (n, a) in enumerate(r.tools)
            ]
            return web.json_response(
                {
                    "output": {"message": {"role": "assistant", "content": content}},
                    "stopReason": stop,
                    "usage": _usage(r.usage),
                    "metrics": {"latencyMs": 12},
                }
            )
        return await self._stream(request, r, stop, thought)

    async def _stream(self, request: web.Request, r: Reply, stop: str, thought: str) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"content-type": "application/vnd.amazon.eventstream", "x-amzn-requestid": "fake-request"}
        )
        await resp.prepare(request)
        checker = EventStreamBuffer()

        async def send(event: str, payload: dict[str, Any], exception: bool = False) -> None:
            headers = (
                {":message-type": "exception", ":exception-type": event}
                if exception
                else {":message-type": "event", ":event-type": event}
            )
            frame = encode_frame(
                {**headers, ":content-type": "application/json"},
                json.dumps({**payload, "p": "abcdefghij"}).encode(),
            )
            checker.add_data(frame)
            checked = list(checker)  # botocore's decoder reads it back (CRCs included) ...
            assert len(checked) == 1 and json.loads(checked[0].payload)["p"] == "abcdefghij"
            await resp.write(frame)
            await asyncio.sleep(0)

        events: list[tuple[str, dict[str, Any]]] = []
        block = 0
        if thought:
            half = len(thought) // 2
            events += [
                ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": d}})
                for d in ({"text": thought[:half]}, {"text": thought[half:]}, {"signature": SIGNATURE})
            ]
            events.append(("contentBlockStop", {"contentBlockIndex": 0}))
            block = 1
        if r.text:
            words = r.text.split(" ")
            events += [
                ("contentBlockDelta", {"contentBlockIndex": block, "delta": {"text": " " * (i > 0) + w}})
                for i, w in enumerate(words)
            ]
            events.append(("contentBlockStop", {"contentBlockIndex": block}))
            block += 1
        for i, (name, args) in enumerate(r.tools):
            idx = block + i
            raw = json.dumps(args)
            half = len(raw) // 2
            events.append(
                (
                    "contentBlockStart",
                    {
                        "contentBlockIndex": idx,
                        "start": {"toolUse": {"toolUseId": f"tooluse_{i}", "name": name}},
                    },
                )
            )
            events += [
                ("contentBlockDelta", {"contentBlockIndex": idx, "delta": {"toolUse": {"input": part}}})
                for part in (raw[:half], raw[half:])
            ]
            events.append(("contentBlockStop", {"contentBlockIndex": idx}))
        await send("messageStart", {"role": "assistant"})
        for n, (event, payload) in enumerate(events):
            if r.exception is not None and n == r.exception_after:
                await send(r.exception, {"message": f"fake {r.exception}"}, exception=True)
                await resp.write_eof()
                return resp
            await send(event, payload)
        await send("messageStop", {"stopReason": stop})
        if r.metadata:
            await send("metadata", {"usage": _usage(r.usage), "metrics": {"latencyMs": 12}})
        await resp.write_eof()
        return resp


def _check_thinking(model: str, thinking: Any, body: dict[str, Any]) -> str | None:
    """What Bedrock answers Claude's thinking field with (None: taken)."""
    if "anthropic.claude" not in model:
        return None  # other families' fields are not checked here
    if not any(name in model for name in THINKING_CLAUDE):
        return "The model returned the following errors: thinking: Extra inputs are not permitted"
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "disabled"):
        return ("The model returned the following errors: thinking.type: Input should be 'enabled' or "
                "'disabled'")
    if thinking["type"] == "disabled":
        return None
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < 1024:
        return ("The model returned the following errors: thinking.enabled.budget_tokens: Input should be "
                "greater than or equal to 1024")
    if (body.get("inferenceConfig") or {}).get("maxTokens", 4096) <= budget:
        return ("The model returned the following errors: `max_tokens` must be greater than "
                "`thinking.budget_tokens`")
    return None


def _usage(u: dict[str, int]) -> dict[str, int]:
    total = sum(
        u.get(k, 0) for k in ("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheWriteInputTokens")
    )
    return {**u, "totalTokens": total}


def read_invoke(request: web.Request, raw: bytes, model: str, op: str) -> tuple[Any, web.Response | None]:
    """An InvokeModel-family body as Bedrock reads it: the request checked against botocore's input
    shape of ``op``, then the body as JSON; (body, None), or (None, Bedrock's refusal)."""
    params: dict[str, Any] = {"modelId": model, "body": raw}
    if request.headers.get("content-type"):
        params["contentType"] = request.headers["content-type"]
    report = ParamValidator().validate(params, _MODEL.operation_model(op).input_shape)
    if report.has_errors():
        return None, _error("ValidationException", 400, report.generate_report())
    try:
        return json.loads(raw), None
    except ValueError:
        return None, _error("ValidationException", 400, "Malformed input request: body is not JSON")


def _error(kind: str, status: int, message: str) -> web.Response:
    return web.json_response(
        {"message": message},
        status=status,
        headers={"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"},
    )


def _check_auth(request: web.Request, raw: bytes) -> tuple[str, int, str] | None:
    """None when the request is signed with the fake keys (recomputed with botocore) or carries
    the fake API key; else the error AWS would answer."""
    auth = request.headers.get("authorization", "")
    if auth == f"Bearer {API_KEY}":
        return None
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return ("UnrecognizedClientException", 403, "missing or unknown authorization")
    fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 ") :].split(","))
    access, day, region, service, _ = fields["Credential"].split("/")
    stamp = request.headers.get("x-amz-date", "")
    if access != ACCESS_KEY or region != REGION or service != "bedrock" or not stamp.startswith(day):
        return ("UnrecognizedClientException", 403, "The security token included in the request is invalid.")
    names = fields["SignedHeaders"].split(";")
    if "host" not in names or "x-amz-date" not in names:
        return ("InvalidSignatureException", 403, "host and x-amz-date must be signed")
    token = request.headers.get("x-amz-security-token")
    req = AWSRequest(
        request.method,
        f"http://{request.host}{request.raw_path}",
        data=raw,
        headers={n: request.headers.get(n, "") for n in names},
    )
    req.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY, token), "bedrock", REGION)
    expected = signer.signature(signer.string_to_sign(req, signer.canonical_request(req)), req)
    if expected != fields["Signature"]:
        return (
            "InvalidSignatureException",
            403,
            "The request signature we calculated does not match the signature you provided.",
        )
    return None


def _as_params(body: dict[str, Any]) -> dict[str, Any]:
    """The JSON body as botocore's parameters (blobs are base64 on the wire, bytes as params)."""

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            if "bytes" in v and isinstance(v["bytes"], str) and len(v) == 1:
                return {"bytes": base64.b64decode(v["bytes"])}
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(body)
