"""A real HTTP server on loopback that plays Anthropic's Messages API (``POST /v1/messages``),
faithful where the gateway depends on it, and misbehaves on request.

Every request body is validated with the ``anthropic`` SDK's own request type
(``MessageCreateParams``), and every answer, stream event and error body it sends is validated
with the SDK's own response models before it is sent (``Message``, ``RawMessageStreamEvent``,
``ErrorResponse``): what this mock says, the real API could say. A ``thinking`` block sent back
with an empty signature is refused as Anthropic refuses a signature it did not write (the SDK's
types take any string). tests/providers/test_anthropic_mock.py
drives it with the SDK as its client (calibration).

    async with FakeAnthropic(key="sk-ant") as up:      # up.url == "http://127.0.0.1:PORT"
        up.script.append(Claude(status=529))           # the next request gets this
        up.requests[-1].body                           # what was sent, parsed
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pydantic
from aiohttp import web
from anthropic.types import Message, MessageTokensCount, RawMessageStreamEvent
from anthropic.types.message_count_tokens_params import MessageCountTokensParams
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from anthropic.types.shared import ErrorResponse

from tests.fakes.serve import serve_app

_REQUEST = pydantic.TypeAdapter(MessageCreateParamsNonStreaming)
_COUNT = pydantic.TypeAdapter(MessageCountTokensParams)
SIGNATURE = "EuYBCkQYAiJAsig+fake/signature=="  # what a thinking block is signed with
_EVENT = pydantic.TypeAdapter(RawMessageStreamEvent)
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


def _consume(x: Any) -> None:
    """Run the lazy validators pydantic leaves in ``Iterable`` fields (messages, content blocks)."""
    if isinstance(x, dict):
        for v in x.values():
            _consume(v)
    elif isinstance(x, (list, tuple)) or hasattr(x, "__next__"):
        for v in x:
            _consume(v)


@dataclass
class Claude:
    """What the next answer does."""

    status: int = 200
    error: str = "upstream says no"
    retry_after: str | None = None  # the retry-after header, as sent
    text: str = "Hello from Claude"
    tools: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # tool_use blocks to answer
    cache_read: int = 0
    cache_write: int = 0
    inband_error: str | None = None  # streams: an error event of this type ...
    error_after: int = 0  # ... after this many text deltas (0: before any content)
    cut_after: int | None = None  # streams: drop the connection after this many events
    thinking: str | None = None  # a thinking block (with a signature) before the answer


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes = b""  # the body's bytes as they arrived


@dataclass
class FakeAnthropic:
    key: str = "sk-ant-test"
    default: Claude = field(default_factory=Claude)
    script: list[Claude] = field(default_factory=list)
    requests: list[Seen] = field(default_factory=list)
    port: int = 0
    # Act as Anthropic's prompt cache: a tools + system prefix marked with cache_control is
    # written on first sight and read after (its words are the tokens), instead of the script's.
    prompt_cache: bool = False
    cached: set[str] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeAnthropic:
        app = web.Application()
        app.router.add_post("/v1/messages", self._handle)
        app.router.add_post("/v1/messages/count_tokens", self._count)
        self._runner, self.port = await serve_app(app, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()

    @staticmethod
    def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
        body = {"type": "error", "error": {"type": _ERROR_TYPES.get(status, "api_error"), "message": message},
                "request_id": "req_fake"}
        ErrorResponse.model_validate(body)
        return web.json_response(body, status=status, headers=headers)

    async def _seen(self, request: web.Request) -> tuple[dict[str, Any], web.Response | None]:
        raw = await request.read()
        body = json.loads(raw)
        self.requests.append(Seen(request.path, dict(request.headers), body, raw))
        given = (request.headers.get("x-api-key")
                 or request.headers.get("authorization", "").removeprefix("Bearer "))
        if given != self.key:
            return body, self._error(401, f"invalid x-api-key {given}")  # quotes the key, as APIs do
        if "anthropic-version" not in request.headers:
            return body, self._error(400, "anthropic-version: header is required")
        return body, None

    @staticmethod
    def tokens(body: dict[str, Any]) -> int:
        """This fake's token count of a prompt (its answers' ``input_tokens`` too)."""
        return len(json.dumps(body["messages"]).split()) + len(str(body.get("system", "")).split())

    @staticmethod
    def unsigned(body: dict[str, Any]) -> str | None:
        """Anthropic's refusal of a thinking block it did not sign (this fake knows only the empty
        signature for one), with the block's place as Anthropic names it."""
        for i, m in enumerate(body.get("messages") or []):
            for j, block in enumerate(m.get("content") if isinstance(m.get("content"), list) else []):
                if isinstance(block, dict) and block.get("type") == "thinking" and not block.get("signature"):
                    return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
        return None

    async def _count(self, request: web.Request) -> web.Response:
        """``POST /v1/messages/count_tokens``: the Messages fields without max_tokens or stream."""
        body, refused = await self._seen(request)
        if refused is not None:
            return refused
        extra = sorted(set(body) - set(MessageCountTokensParams.__annotations__))
        if extra:
            return self._error(400, f"{extra[0]}: Extra inputs are not permitted")
        try:
            _consume(_COUNT.validate_python(body))
        except pydantic.ValidationError as e:
            return self._error(400, f"invalid request: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}")
        if (said := self.unsigned(body)) is not None:
            return self._error(400, said)
        out = {"input_tokens": self.tokens(body)}
        MessageTokensCount.model_validate(out)
        return web.json_response(out)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body, refused = await self._seen(request)
        if refused is not None:
            return refused
        try:
            _consume(_REQUEST.validate_python({k: v for k, v in body.items() if k != "stream"}))
        except pydantic.ValidationError as e:
            return self._error(400, f"invalid request: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}")
        if (said := self.unsigned(body)) is not None:
            return self._error(400, said)
        b = self.script.pop(0) if self.script else self.default
        if b.status >= 400:
            headers = {"retry-after": b.retry_after} if b.retry_after is not None else None
            return self._error(b.status, b.error, headers)
        text, stop_reason, stop_seq = b.text, "end_turn", None
        for s in body.get("stop_sequences") or []:
            if s in text:
                text, stop_reason, stop_seq = text[:text.index(s)], "stop_sequence", s
        fmt = (body.get("output_config") or {}).get("format")
        if fmt is not None:
            text = json.dumps({"answer": text})
        words = text.split(" ")
        pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
        if len(pieces) > body["max_tokens"]:
            pieces = pieces[:body["max_tokens"]]
            text, stop_reason = "".join(pieces), "max_tokens"
        if b.tools and stop_reason == "end_turn":
            stop_reason = "tool_use"
        prompt, read, write = self.tokens(body), b.cache_read, b.cache_write
        prefix = json.dumps([body.get("tools"), body.get("system")])
        if self.prompt_cache and '"cache_control"' in prefix:
            n = len(prefix.split())
            read, write = (n, 0) if prefix in self.cached else (0, n)
            self.cached.add(prefix)
            prompt = max(prompt - n, 1)  # input_tokens: what neither read nor wrote the cache
        usage = {"input_tokens": prompt,
                 "output_tokens": len(pieces) + 5 * len(b.tools),
                 "cache_read_input_tokens": read, "cache_creation_input_tokens": write}
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        if b.thinking is not None:
            content.insert(0, {"type": "thinking", "thinking": b.thinking, "signature": SIGNATURE})
        content += [{"type": "tool_use", "id": f"toolu_{i:02d}{name}", "name": name, "input": args}
                    for i, (name, args) in enumerate(b.tools)]
        msg = {"id": "msg_fake", "type": "message", "role": "assistant", "model": body["model"],
               "content": content, "stop_reason": stop_reason, "stop_sequence": stop_seq, "usage": usage}
        if not body.get("stream"):
            Message.model_validate(msg)
            return web.json_response(msg)
        return await self._stream(request, b, msg, pieces)

    async def _stream(self, request: web.Request, b: Claude, msg: dict[str, Any],
                      pieces: list[str]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        usage = msg["usage"]
        start = {**msg, "content": [], "stop_reason": None, "stop_sequence": None,
                 "usage": {**usage, "output_tokens": 1}}
        events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
        error = {"type": "error", "error": {"type": b.inband_error or "", "message": b.error}}
        if b.inband_error and b.error_after == 0:
            events.append(error)
        index = 0
        if b.thinking is not None:
            events += [{"type": "content_block_start", "index": 0,
                        "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
                       {"type": "content_block_delta", "index": 0,
                        "delta": {"type": "thinking_delta", "thinking": b.thinking}},
                       {"type": "content_block_delta", "index": 0,
                        "delta": {"type": "signature_delta", "signature": SIGNATURE}},
                       {"type": "content_block_stop", "index": 0}]
            index = 1
        if pieces and pieces != [""]:
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "text", "text": ""}})
            for i, p in enumerate(pieces):
                events.append({"type": "content_block_delta", "index": index,
                               "delta": {"type": "text_delta", "text": p}})
                if b.inband_error and b.error_after == i + 1:
                    events.append(error)
            events.append({"type": "content_block_stop", "index": index})
            index += 1
        for block in msg["content"]:
            if block["type"] != "tool_use":
                continue
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {**block, "input": {}}})
            args = json.dumps(block["input"])
            half = len(args) // 2
            for part in (args[:half], args[half:]):  # arguments arrive in pieces
                events.append({"type": "content_block_delta", "index": index,
                               "delta": {"type": "input_json_delta", "partial_json": part}})
            events.append({"type": "content_block_stop", "index": index})
            index += 1
        events.append({"type": "message_delta", "delta": {"stop_reason": msg["stop_reason"],
                                                          "stop_sequence": msg["stop_sequence"]},
                       "usage": {"output_tokens": usage["output_tokens"]}})
        events.append({"type": "message_stop"})
        for n, ev in enumerate(events):
            if b.cut_after is not None and n >= b.cut_after:
                request.transport.close()  # type: ignore[union-attr]  # a cut stream
                return resp
            if ev["type"] == "error":
                ErrorResponse.model_validate({**ev, "request_id": None})
            elif ev["type"] != "ping":  # documented, and skipped by the SDK (not in its union)
                _EVENT.validate_python(ev)
            await resp.write(b"event: %s\ndata: %s\n\n" % (ev["type"].encode(), json.dumps(ev).encode()))
            if ev["type"] == "error":
                break
            await asyncio.sleep(0)
        await resp.write_eof()
        return resp
