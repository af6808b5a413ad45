"""The OpenAI codec: bodies written from the dialect tables (``request.py``),
answers read as OpenAI's (``answers.py``). Every OpenAI-compatible server speaks it: OpenAI, vLLM,
llama.cpp, mistral.rs, Fireworks, SGP, Azure, Mistral and Cohere's compatibility API; the rows in
rows.py differ only in paths, auth and capabilities."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from switchyard.core.canonical import CanonicalRequest, Chunk
from switchyard.core.deployments import DeploymentConfig
from switchyard.dialects.reasoning import fit_openai_chat
from switchyard.dialects.registry import caller_param
from switchyard.dialects.spec import Dialect
from switchyard.providers.emulation import Emulation
from switchyard.providers.failures import message_of
from switchyard.providers.openai.answers import chunks_of, decode_answer, embeddings_of
from switchyard.providers.openai.request import render_request
from switchyard.providers.wire import Caps, Lanes, WireError


def _error_text(error: Any) -> str:
    return message_of({"error": error}) or "no message"


def embeddings_body(req: CanonicalRequest, model: str) -> dict[str, Any]:
    """OpenAI's embeddings body, as the caller wrote it (every OpenAI-family server reads it; the
    answer comes back in either encoding and is written in the caller's)."""
    prompts = req.prompt or []
    body: dict[str, Any] = {"model": model, "input": prompts[0] if len(prompts) == 1 else prompts}
    for name in ("dimensions", "encoding_format", "user"):
        if (v := getattr(req, name)) is not None:
            body[name] = v
    return body


@dataclass(frozen=True, slots=True)
class OpenAICodec:
    dialect: Dialect  # the body's field names (the upstream's own dialect table)
    caps: Caps

    @property
    def lanes(self) -> Lanes:
        return Lanes(native_dialect=self.dialect.name)

    def render(self, req: CanonicalRequest, model: str,
               dep: DeploymentConfig) -> tuple[dict[str, Any], Emulation]:
        if req.kind == "embedding":
            return embeddings_body(req, model), Emulation()
        body, emulation = render_request(self.dialect, req, model, dep.allow_extra_params,
                                         stream_usage=self.caps.stream_usage,
                                         overflow_is_error=self.caps.overflow_is_error)
        if req.kind == "chat":  # the bound's name, reasoning controls, a reasoning model's rules
            caps = self.caps
            fit_openai_chat(body, req, (model, req.model), completion_tokens=caps.completion_tokens_bound,
                            controls=caps.reasoning_controls, caller_param=caller_param)
        return body, emulation

    def whole(self, raw: bytes, req: CanonicalRequest) -> list[Chunk]:
        if req.kind == "embedding":
            try:
                return [embeddings_of(raw, len(req.prompt or ()))]
            except ValueError as e:
                raise WireError(str(e)) from None
        try:
            obj = decode_answer(raw)
        except msgspec.DecodeError:
            raise WireError("sent a malformed answer") from None
        if obj.error is not None:
            raise WireError("answered 200 with an error", _error_text(obj.error))
        if not obj.choices:
            raise WireError("sent an answer without any choice")
        return chunks_of(obj, chat=req.kind == "chat", delta=False)

    def stream(self, req: CanonicalRequest) -> OpenAIStream:
        return OpenAIStream(req.kind == "chat")


class OpenAIStream:
    """Data-only events ending at ``[DONE]``; a stream cut before it (or before a finish_reason)
    is no success. Azure's first event (``choices: []`` with prompt_filter_results) counts as an
    event and yields nothing."""

    __slots__ = ("chat", "done", "events", "finished")

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.done = False
        self.finished = False
        self.events = 0

    def feed(self, name: bytes | None, data: bytes) -> list[Chunk]:
        if data == b"[DONE]":
            self.done = True
            return []
        try:
            ans = decode_answer(data)
        except msgspec.DecodeError:
            raise WireError("sent a malformed stream event") from None
        if ans.error is not None:
            raise WireError("reported an error mid-stream", _error_text(ans.error))
        if ans.choices is None and ans.usage is None:
            return []
        self.events += 1
        got = chunks_of(ans, chat=self.chat, delta=True)
        if not self.finished:
            for c in got:  # (a loop, not any() over a generator: this runs once an event)
                if c.finish_reason:
                    self.finished = True
                    break
        return got

    def ending(self) -> str | None:
        if self.events == 0:
            return "sent a stream without any event"
        if not (self.done or self.finished):  # the body ended (a close) before [DONE] or a finish_reason
            return "ended the stream before it finished"
        return None
