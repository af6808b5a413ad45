"""Real HTTP servers on loopback that play Google's generateContent API, as the Gemini API serves
it (``/v1beta/models/{m}:generateContent``, ``:streamGenerateContent?alt=sse``, ``x-goog-api-key``)
and as Vertex AI does (``/v1/projects/{p}/locations/{l}/publishers/google/models/{m}:...`` with an
OAuth bearer token), plus the OAuth token endpoint a service account's ``token_uri`` names. The
embedding endpoints (``:batchEmbedContents``, Vertex's ``:predict``) are tests/fakes/gemini_embed.py.

Faithful where the gateway can go wrong: each request's parts are validated with google-genai's
own pydantic models (``types.Content``, ``GenerationConfig``, ``Tool``, ``ToolConfig``: unknown
fields are refused), and every answer or stream event is validated as a
``types.GenerateContentResponse`` (with warnings as errors: an unknown enum value fails) before
it is sent. Thinking as Google gates it: a ``thinkingConfig`` to a model that does not think is a
400, as is a budget outside the model's range or ``includeThoughts`` on a model whose thinking is
off (Flash-Lite unless given a budget); asked for, thoughts come back as ``thought: true`` parts
before the answer. The token endpoint verifies the JWT assertion with ``google.auth.jwt.decode`` against
the service account's public key. ``tests/providers/test_gemini_fake.py`` calibrates both with
google-genai's ``Client`` as their client.

The token endpoint runs on its own thread (google-auth fetches tokens synchronously).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
import warnings
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web
from google.genai import types

from tests.fakes import gemini_embed as embed
from tests.fakes.serve import serve_app

API_KEY = "gemini-fake-key"
GOOGLE_TOKEN_URL = "https://oauth2.googleapis.com/token"  # the JWT's audience, wherever it is posted
STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


@dataclass
class Reply:
    text: str = "Hello from Gemini"
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # functionCall parts
    finish: str = "STOP"
    block: str | None = None  # promptFeedback.blockReason: no candidates at all
    usage: dict[str, int] = field(default_factory=lambda: {"promptTokenCount": 6, "candidatesTokenCount": 3})
    status: int = 200  # an HTTP error instead of an answer
    error_after: int | None = None  # streams: an {"error": ...} event after this many events
    logprobs: bool = False
    thought: str = "I should greet back"  # the thought parts' text, when includeThoughts asks


# Google's thinking guide: the thinking models, each with its budget range and whether it thinks
# unasked (first matching prefix wins; -1, dynamic, is taken by all; 0, off, by those whose range
# starts at 0 and by Flash-Lite). Gemini 2.5's image and
# speech models and every model not listed (1.5, 2.0, Gemma) take no thinkingConfig.
THINKING: list[tuple[str, tuple[int, int, bool]]] = [
    ("gemini-2.5-pro", (128, 32768, True)),
    ("gemini-2.5-flash-lite", (512, 24576, False)),
    ("gemini-2.5-flash", (0, 24576, True)),
    ("gemini-3", (128, 32768, True)),
]


def thinking_of(model: str) -> tuple[int, int, bool] | None:
    if "-tts" in model or (model.startswith("gemini-2.5") and "-image" in model):
        return None
    return next((spec for prefix, spec in THINKING if model.startswith(prefix)), None)


def _field(obj: dict[str, Any], camel: str) -> Any:
    """A field by its JSON name or its proto name (Google takes both; google-genai sends
    thinkingConfig's fields snake_case)."""
    return obj.get(camel, obj.get("".join("_" + c.lower() if c.isupper() else c for c in camel)))


def check_thinking(model: str, vertex: bool, config: dict[str, Any]) -> str | None:
    """Google's refusals of a thinkingConfig (None: taken), in each API's words."""
    spec = thinking_of(model)
    if spec is None:
        return ("Unable to submit request because thinking is not supported by this model."
                if vertex else "thinking_config is not supported.")
    low, high, on = spec
    budget = _field(config, "thinkingBudget")
    off = budget == 0 and (low == 0 or not on)
    if budget is not None and budget != -1 and not off and not low <= budget <= high:
        return f"The thinking budget ({budget}) is invalid."
    if _field(config, "includeThoughts") and (budget == 0 or (budget is None and not on)):
        return ("Unable to submit request because Thinking_config.include_thoughts is only enabled "
                "when thinking is enabled.")
    return None


@dataclass
class Seen:
    path: str
    method: str
    headers: dict[str, str]
    body: dict[str, Any]


def _valid(model: type[Any], obj: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.model_validate(obj)


def check_request(body: dict[str, Any]) -> str | None:
    """What google-genai's models refuse in a generateContent body (None: nothing)."""
    known = {
        "contents": None,
        "systemInstruction": types.Content,
        "generationConfig": types.GenerationConfig,
        "toolConfig": types.ToolConfig,
    }
    try:
        for key, value in body.items():
            if key == "contents":
                for c in value:
                    _valid(types.Content, c)
                    if c.get("role") not in ("user", "model"):
                        return f"contents role {c.get('role')!r}"
            elif key == "tools":
                for t in value:
                    _valid(types.Tool, t)
            elif key in known:
                _valid(known[key], value)  # type: ignore[arg-type]
            else:
                return f"Invalid JSON payload received. Unknown name {key!r}"
    except Exception as e:  # pydantic's ValidationError, or a warning turned error
        return str(e)[:500]
    return None if body.get("contents") else "contents is required"


@dataclass
class FakeGemini:
    default: Reply = field(default_factory=Reply)
    script: list[Reply] = field(default_factory=list)
    requests: list[Seen] = field(default_factory=list)
    tokens: set[str] = field(default_factory=set)  # bearer tokens Vertex accepts (from FakeTokenServer)
    embed_usage: bool = False  # Gemini API embeddings answers carry usageMetadata
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeGemini:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner, self.port = await serve_app(app)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        model_part = path.rsplit("/models/", 1)[-1]
        model, _, method = model_part.partition(":")
        vertex = path.startswith("/v1/projects/") and "/publishers/google/models/" in path
        if (
            not (vertex or path.startswith(("/v1beta/models/", "/v1/models/")))
            or method not in ("generateContent", "streamGenerateContent", *embed.METHODS)
            or not model
        ):
            return _error(404, f"no route {path}")
        if vertex:
            auth = request.headers.get("authorization", "")
            if not auth.startswith("Bearer ") or auth[7:] not in self.tokens:
                return _error(401, "Request had invalid authentication credentials.")
        elif "x-goog-api-key" not in request.headers:
            return _error(403, "Method doesn't allow unregistered callers (callers without established "
                          "identity). Please use API Key or other form of API consumer identity to call "
                          "this API.")
        elif request.headers["x-goog-api-key"] != API_KEY:  # Google's answer to a wrong key: a 400
            return _error(400, "API key not valid. Please pass a valid API key.", reason="API_KEY_INVALID")
        stream = method == "streamGenerateContent"
        if stream and request.query.get("alt") != "sse":
            return _error(400, "this fake streams only with alt=sse")
        try:
            body = json.loads(await request.read())
        except ValueError:
            return _error(400, "Invalid JSON payload received.")
        got = embed.texts_of(method, vertex, model, body) if method in embed.METHODS else check_request(body)
        thinking = (body.get("generationConfig") or {}).get("thinkingConfig")
        if got is None and thinking is not None:
            got = check_thinking(model, vertex, thinking)
        if isinstance(got, str):
            return _error(400, got)
        self.requests.append(Seen(path, method, dict(request.headers), body))
        r = self.script.pop(0) if self.script else self.default
        if r.status != 200:
            return _error(r.status, f"fake {STATUS.get(r.status, 'error')}")
        if got is not None:  # an embedding's texts and dimensionality
            return web.json_response(embed.answer(method, vertex, *got, usage=self.embed_usage))
        n = (body.get("generationConfig") or {}).get("candidateCount") or 1
        thought = r.thought if thinking is not None and _field(thinking, "includeThoughts") else ""
        if not stream:
            answer = _answer(r, n, [r.text], final=True, thought=thought)
            _valid(types.GenerateContentResponse, answer)
            return web.json_response(answer)
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        words = r.text.split(" ") if r.text else []
        pieces = [[w if i == 0 else " " + w] for i, w in enumerate(words)] or [[]]
        events = [_answer(r, n, [], final=False, thought=thought)] if thought else []
        events += [_answer(r, n, p, final=False) for p in pieces[:-1]] + [
            _answer(r, n, pieces[-1], final=True)
        ]
        if r.block:
            events = events[-1:]
        for i, ev in enumerate(events):
            if r.error_after is not None and i == r.error_after:
                ev = {"error": {"code": 503, "message": "fake overload mid-stream", "status": "UNAVAILABLE"}}
            else:
                _valid(types.GenerateContentResponse, ev)
            await resp.write(b"data: " + json.dumps(ev).encode() + b"\r\n\r\n")
            await asyncio.sleep(0)
            if "error" in ev:
                break
        await resp.write_eof()
        return resp


def _answer(r: Reply, n: int, texts: list[str], *, final: bool, thought: str = "") -> dict[str, Any]:
    usage = {
        **r.usage,
        "totalTokenCount": sum(v for k, v in r.usage.items() if k != "cachedContentTokenCount"),
    }
    if r.block:
        return {"promptFeedback": {"blockReason": r.block}, "usageMetadata": usage, "modelVersion": "fake"}
    cands = []
    for i in range(n):
        parts: list[dict[str, Any]] = [{"text": thought, "thought": True}] if thought else []
        parts += [{"text": t} for t in texts]
        if final:
            parts += [{"functionCall": {"name": name, "args": args}} for name, args in r.calls]
        cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": i}
        if final:
            cand["finishReason"] = r.finish
        if r.logprobs:
            cand["logprobsResult"] = {
                "chosenCandidates": [{"token": t, "logProbability": -0.5} for t in texts],
                "topCandidates": [{"candidates": [{"token": t, "logProbability": -0.5}]} for t in texts],
            }
        cands.append(cand)
    out: dict[str, Any] = {"candidates": cands, "modelVersion": "fake", "responseId": "r1"}
    if final:
        out["usageMetadata"] = usage
    return out


def _error(status: int, message: str, reason: str | None = None) -> web.Response:
    error: dict[str, Any] = {"code": status, "message": message, "status": STATUS.get(status, "UNKNOWN")}
    if reason is not None:  # google.rpc.ErrorInfo, as Google's APIs add it
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                             "domain": "googleapis.com",
                             "metadata": {"service": "generativelanguage.googleapis.com"}}]
    return web.json_response({"error": error}, status=status)


class FakeTokenServer:
    """Google's OAuth token endpoint for service accounts, on loopback: verifies the JWT-bearer
    assertion (RS256, signed by the key whose public half it holds; audience Google's token URL)
    and issues a token good for ``lifetime`` seconds, added to ``accepted``."""

    def __init__(self, public_pem: bytes, accepted: set[str], lifetime: int = 3600) -> None:
        self.public_pem, self.accepted, self.lifetime = public_pem, accepted, lifetime
        self.issued: list[dict[str, Any]] = []  # the verified claims of each grant
        self.stall = 0.0  # seconds each grant waits before it answers (a token endpoint in trouble)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if outer.stall:
                    time.sleep(outer.stall)  # its own thread: the test's loop runs on
                form = parse_qs(self.rfile.read(int(self.headers.get("content-length") or 0)).decode())
                status, answer = outer._grant(form)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/token"

    def _grant(self, form: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        from google.auth import jwt

        if form.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"]:
            return 400, {"error": "unsupported_grant_type"}
        try:
            claims = jwt.decode(form["assertion"][0], certs=self.public_pem, audience=GOOGLE_TOKEN_URL)
        except Exception as e:
            return 400, {"error": "invalid_grant", "error_description": str(e)[:200]}
        if "cloud-platform" not in str(claims.get("scope")) or claims["exp"] < time.time():
            return 400, {"error": "invalid_scope"}
        self.issued.append(claims)
        token = "ya29.fake-" + secrets.token_urlsafe(12)
        self.accepted.add(token)
        return 200, {"access_token": token, "expires_in": self.lifetime, "token_type": "Bearer"}

    def __enter__(self) -> FakeTokenServer:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def vertex_dep(tokens: FakeTokenServer, folder: Path, url: str, model: str, *, name: str = "v",
               location: str = "us-central1") -> tuple[dict[str, Any], dict[str, Any]]:
    """A vertex deployment of ``model`` at ``url`` whose service-account file (written in
    ``folder``) holds a fresh key ``tokens`` trusts; and that file's JSON (its secrets included)."""
    info, tokens.public_pem = service_account(tokens.url)
    path = folder / f"sa-{name}.json"
    path.write_text(json.dumps(info))
    return {"name": name, "backend": "upstream", "provider": "vertex", "base_url": url, "project": "proj",
            "location": location, "credentials": str(path), "model": model}, info


def service_account(token_uri: str) -> tuple[dict[str, Any], bytes]:
    """A fresh service-account key file's JSON (``token_uri`` pointed at the fake) and its public key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    info = {
        "type": "service_account",
        "project_id": "proj",
        "private_key_id": "k1",
        "private_key": private,
        "client_email": "gw@proj.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    }
    return info, public
