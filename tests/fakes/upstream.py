"""A real HTTP server on loopback that plays an OpenAI-shaped upstream (any dialect's answers
share that shape), and misbehaves on request: errors, stalls, cut streams, refusals.

    async with FakeUpstream() as up:          # up.url == "http://127.0.0.1:PORT/v1"
        up.script.append(Behaviour(status=429, retry_after=1))   # the next request gets this
        ...
        up.requests[-1].body                  # what the gateway sent, parsed
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.openai_rules import reasoning_refusal


@dataclass
class Behaviour:
    status: int = 200
    error: str = "upstream says no"
    retry_after: float | None = None
    stall: float = 0.0  # seconds before answering (a stalled upstream)
    cut_after: int | None = None  # streams: drop the connection after this many events
    text: str | None = None  # completion text; default: words "w0 w1 ..." up to max_tokens
    usage: bool = True  # report usage (non-stream always; stream when asked or always_usage)
    cached_tokens: int = 0  # of the prompt, read from OpenAI's prompt cache (usage.prompt_tokens_details)
    chunk_delay: float = 0.0
    logprob: float = -1.0  # every token's logprob, when the request asks for logprobs
    # chat: reasoning text before the answer, as DeepSeek, llama.cpp and vLLM's reasoning parsers
    # write it (in the message, or streamed a word per delta, under ``reasoning_field``)
    reasoning: str | None = None
    reasoning_field: str = "reasoning_content"
    pieces: list[str] | None = None  # the answer streamed in exactly these pieces (overrides text)
    echo: bool = False  # chat: answer with the last message's text, as the gateway sent it
    finish: str | None = None  # the finish_reason to give (e.g. content_filter); default: length/stop


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    query: dict[str, str] = field(default_factory=dict)
    peer_port: int | None = None  # the caller's side of the connection: one pool, one port

    @property
    def bound(self) -> Any:
        """The completion bound sent, under either name (OpenAI's chat: max_completion_tokens)."""
        return self.body.get("max_completion_tokens", self.body.get("max_tokens"))


@dataclass
class FakeUpstream:
    default: Behaviour = field(default_factory=Behaviour)
    script: list[Behaviour] = field(default_factory=list)  # consumed one per request
    requests: list[Seen] = field(default_factory=list)
    always_usage: bool = False  # Fireworks/SGP style: usage in the last chunk unasked
    port: int = 0
    cut: int = 0  # streams cut off so far
    inflight: int = 0  # requests being answered now
    peak: int = 0  # the most ever answered at once
    # vLLM's refusal of a request over its max_model_len (prompt counted as below, in words)
    context_window: int | None = None
    # GET /models as vLLM answers it: max_model_len per model id (None: no such endpoint, a 404)
    reported: dict[str, int] | None = None
    models_stall: float = 0.0  # seconds before /models answers
    models_asked: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeUpstream:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self._site = web.SockSite(self._runner, sock)
        await self._site.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.StreamResponse:
        self.models_asked += 1
        if self.models_stall:
            await asyncio.sleep(self.models_stall)
        if self.reported is None:
            return web.json_response({"detail": "Not Found"}, status=404)
        return web.json_response({"object": "list", "data": [
            {"id": name, "object": "model", "created": 1, "owned_by": "vllm", "root": name,
             "max_model_len": n} for name, n in self.reported.items()]})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        try:
            return await self._answer(request)
        finally:
            self.inflight -= 1

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.requests.append(Seen(request.path, dict(request.headers), body, dict(request.query),
                                  peer[1] if peer else None))
        b = self.script.pop(0) if self.script else self.default
        if b.stall:
            await asyncio.sleep(b.stall)
        if b.status >= 400:
            headers = {"retry-after": str(b.retry_after)} if b.retry_after is not None else {}
            return web.json_response({"error": {"message": b.error, "type": "upstream"}},
                                     status=b.status, headers=headers)
        if request.path.endswith("/embeddings"):
            return web.json_response(_embeddings(body))
        chat = request.path.endswith("chat/completions")
        refusal = reasoning_refusal(str(body.get("model")), body) if chat else None
        if refusal is not None:  # OpenAI's reasoning models refuse max_tokens and changed sampling
            return web.json_response({"error": refusal}, status=400)
        n_tokens = (body.get("max_tokens") or body.get("max_completion_tokens") or body.get("max_new_tokens")
                    or 16)
        if n_tokens < 0:
            n_tokens = 16
        prompt_tokens = len(json.dumps(body.get("prompt") or body.get("messages")).split())
        if self.context_window is not None and prompt_tokens + n_tokens > self.context_window:
            return web.json_response({"object": "error", "type": "BadRequestError", "code": 400, "message": (
                f"This model's maximum context length is {self.context_window} tokens. However, you "
                f"requested {prompt_tokens + n_tokens} tokens ({prompt_tokens} in the messages, "
                f"{n_tokens} in the completion). Please reduce the length of the messages or completion.")},
                status=400)
        words = (b.text.split(" ") if b.text is not None else [f"w{i}" for i in range(n_tokens)])
        pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
        if b.echo:
            last = (body.get("messages") or [{}])[-1].get("content")
            pieces = [last if isinstance(last, str) else json.dumps(last)]
        if b.pieces is not None:
            pieces = list(b.pieces)
        n = body.get("n") or 1
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(pieces) * n,
                 "total_tokens": prompt_tokens + len(pieces) * n}
        if b.cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": b.cached_tokens}  # type: ignore[assignment]
        finish = b.finish or ("length" if b.text is None and b.pieces is None and not b.echo else "stop")
        if not body.get("stream"):
            call = _tool_call(body) if chat else None
            if call is not None:
                msg = {"role": "assistant", "content": None, "tool_calls": [call],
                       **({b.reasoning_field: b.reasoning} if b.reasoning is not None else {})}
                choices = [{"index": i, "message": msg, "finish_reason": "tool_calls"} for i in range(n)]
            elif chat:
                said = {b.reasoning_field: b.reasoning} if b.reasoning is not None else {}
                choices = [{"index": i, "message": {"role": "assistant", "content": "".join(pieces), **said},
                            "finish_reason": finish} for i in range(n)]
            else:
                lp = ({"tokens": pieces, "token_logprobs": [b.logprob] * len(pieces), "top_logprobs": None}
                      if body.get("logprobs") is not None and body.get("logprobs") is not False else None)
                echoed = _echo(body, lp)
                choices = [{"index": i, "text": echoed + "".join(pieces), "finish_reason": finish,
                            "logprobs": lp} for i in range(n)]
            out: dict[str, Any] = {"id": "cmpl-up", "object": "text_completion", "created": 1,
                                   "model": body.get("model"), "choices": choices}
            if b.usage:
                out["usage"] = usage
            return web.json_response(out)
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(n if chat and b.reasoning else 0):  # reasoning first, as the model thinks first
            for j, w in enumerate((b.reasoning or "").split(" ")):
                delta = {b.reasoning_field: w if j == 0 else " " + w}
                if j == 0:
                    delta["role"] = "assistant"
                event = {"id": "cmpl-up", "model": body.get("model"),
                         "choices": [{"index": i, "delta": delta, "finish_reason": None}]}
                await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        call = _tool_call(body) if chat else None
        if call is not None:  # as OpenAI streams a call: id and name first, then the arguments in pieces
            await _stream_call(resp, body, call)
            pieces = []
        sent = 0
        for i in range(n):
            for j, p in enumerate(pieces):
                if b.cut_after is not None and sent >= b.cut_after:
                    self.cut += 1
                    request.transport.close()  # type: ignore[union-attr]
                    return resp
                last = j == len(pieces) - 1
                choice = ({"index": i, "delta": {"content": p, **({"role": "assistant"} if j == 0 else {})},
                           "finish_reason": finish if last else None} if chat
                          else {"index": i, "text": p, "finish_reason": finish if last else None,
                                "logprobs": None})
                await resp.write(b"data: " + json.dumps({"id": "cmpl-up", "model": body.get("model"),
                                                         "choices": [choice]}).encode() + b"\n\n")
                sent += 1
                if b.chunk_delay:
                    await asyncio.sleep(b.chunk_delay)
        wants_usage = (body.get("stream_options") or {}).get("include_usage") or self.always_usage
        if b.usage and wants_usage:
            await resp.write(b"data: " + json.dumps({"id": "cmpl-up", "choices": [], "usage": usage}).encode()
                             + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def _tool_call(body: dict[str, Any]) -> dict[str, Any] | None:
    """A call of the function ``tool_choice`` names (or, for "required", the first tool): each
    required argument its schema's first enum value, else "w0"."""
    choice, tools = body.get("tool_choice"), body.get("tools") or []
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
    elif choice == "required" and tools:
        name = tools[0]["function"]["name"]
    else:
        return None
    fn = next((t["function"] for t in tools if t.get("function", {}).get("name") == name), None)
    if fn is None:
        return None
    props = (fn.get("parameters") or {}).get("properties") or {}
    args = {k: (props.get(k) or {}).get("enum", ["w0"])[0]
            for k in (fn.get("parameters") or {}).get("required") or []}
    return {"id": "call_up", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def fake_vector(item: Any, dims: int = 8) -> list[float]:
    """A deterministic unit vector for one embeddings input (text or token ids)."""
    seed = sum(ord(ch) for ch in item) if isinstance(item, str) else sum(item)
    raw = [math.sin(seed + k) for k in range(dims)]
    norm = math.sqrt(sum(x * x for x in raw))
    return [x / norm for x in raw]


def _embeddings(body: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's embeddings answer: a vector per input (``dimensions`` long), floats or base64."""
    inputs = body["input"]
    if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)):
        inputs = [inputs]
    data = []
    for i, item in enumerate(inputs):
        vec: Any = fake_vector(item, body.get("dimensions") or 8)
        if body.get("encoding_format") == "base64":
            vec = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
        data.append({"object": "embedding", "index": i, "embedding": vec})
    tokens = sum(len(x.split()) if isinstance(x, str) else len(x) for x in inputs)
    return {"object": "list", "model": body.get("model"), "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


async def _stream_call(resp: web.StreamResponse, body: dict[str, Any], call: dict[str, Any]) -> None:
    args = call["function"]["arguments"]
    cut = len(args) // 2
    deltas = [{"index": 0, "id": call["id"], "type": "function",
               "function": {"name": call["function"]["name"], "arguments": ""}},
              {"index": 0, "function": {"arguments": args[:cut]}},
              {"index": 0, "function": {"arguments": args[cut:]}}]
    for i, d in enumerate(deltas):
        delta = {"role": "assistant", "content": None, "tool_calls": [d]} if i == 0 else {"tool_calls": [d]}
        choice = {"index": 0, "delta": delta, "finish_reason": None}
        await resp.write(b"data: " + json.dumps({"id": "cmpl-up", "model": body.get("model"),
                                                 "choices": [choice]}).encode() + b"\n\n")
    done = {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
    await resp.write(b"data: " + json.dumps({"id": "cmpl-up", "model": body.get("model"),
                                             "choices": [done]}).encode() + b"\n\n")


def _echo(body: dict[str, Any], lp: dict[str, Any] | None) -> str:
    """OpenAI's echo: the prompt leads the text; with logprobs, its words lead the tokens and the
    first has a null logprob (nothing predicts it)."""
    prompt = body.get("prompt")
    if not body.get("echo") or not isinstance(prompt, str):
        return ""
    if lp is not None:
        words = [w if i == 0 else " " + w for i, w in enumerate(prompt.split(" "))]
        lp["tokens"] = words + lp["tokens"]
        lp["token_logprobs"] = [None] + [-0.5] * (len(words) - 1) + lp["token_logprobs"]
    return prompt


def refused_url() -> str:
    """The URL of a loopback port nobody listens on (bound, then closed): connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
