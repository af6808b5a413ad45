"""Answers in Anthropic's shape: a ``message`` object, or the named SSE events of a Messages
stream (``message_start``, ``content_block_start``/``_delta``/``_stop``, ``message_delta`` with
the stop reason and cumulative usage, ``message_stop``, ``ping``; ``error`` when a stream fails).

Canonical chunks carry text and OpenAI-shaped tool-call deltas; each run of text becomes a text
block and each call a ``tool_use`` block (its arguments streamed as ``input_json_delta``). Another
model's plain-text reasoning becomes a ``thinking`` block (``thinking_delta``) when the caller
asked for thinking. Only
choice 0 exists (the API has no ``n``). ``disable_parallel_tool_use`` holds on every backend:
calls after the first are left out.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from switchyard.core.canonical import CanonicalRequest, Chunk, Completion, Usage
from switchyard.core.ids import hex_id
from switchyard.dialects.anthropic import wire
from switchyard.dialects.render import Renderer

_encode = msgspec.json.encode


def event(name: bytes, obj: dict[str, Any]) -> bytes:
    return b"event: " + name + b"\ndata: " + _encode(obj) + b"\n\n"


def _text_delta_head(index: int) -> bytes:
    """A text delta's event for block ``index`` up to its text (which follows, then ``}}``): cut
    from the event ``event`` writes, so the two cannot differ."""
    whole = event(b"content_block_delta", {"type": "content_block_delta", "index": index,
                                           "delta": {"type": "text_delta", "text": ""}})
    return whole[:-len(b'""}}\n\n')]


def tool_input(arguments: Any) -> dict[str, Any]:
    """A call's arguments (JSON text) as the object ``input`` is; text that is not a JSON object
    (a model's malformed call) is kept whole under ``_raw`` rather than lost."""
    if isinstance(arguments, dict):
        return arguments
    if not arguments:
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


def _thought(text: str) -> dict[str, Any]:
    """A thinking block of another model's plain-text reasoning. It has no signature (only
    Anthropic signs thinking); the SDK requires the field, so it is empty, as other gateways send
    it, and a later turn's thinking blocks are not sent back to a translating backend."""
    return {"type": "thinking", "thinking": text, "signature": ""}


def _tool_id(call: dict[str, Any]) -> str:
    tid = call.get("id")
    return tid if isinstance(tid, str) and tid else "toolu_" + hex_id(12)


class AnthropicRenderer(Renderer):
    id_prefix = "msg_"
    sends_done = False
    error_event_name = b"error"

    def __init__(self, req: CanonicalRequest, prompt_tokens: int = 0) -> None:
        super().__init__(req, prompt_tokens)
        self.one_call = req.parallel_tool_calls is False
        self._started = False
        self._block = -1  # the index of the last block opened
        self._open = False  # whether that block is still open
        self._text = False  # whether it is a text block
        self._thought = False  # whether it is a thinking block (the native lane's)
        self._calls: dict[Any, int | None] = {}  # a call's stream index -> its block (None: left out)
        self._finish: str | None = None
        self._word: str | None = None
        self._text_head = b""  # the open text block's delta event, up to its text

    # -- whole answers
    def completion(self, comp: Completion) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        finish = word = None
        for c in comp.choices[:1]:
            content.extend(c.thinking or ())  # as the upstream wrote them, signatures included
            if c.reasoning and self.req.show_reasoning:
                content.append(_thought(c.reasoning))
            if c.text:
                content.append({"type": "text", "text": c.text})
            for call in (c.tool_calls or [])[:1 if self.one_call else None]:
                fn = call.get("function") or {}
                content.append({"type": "tool_use", "id": _tool_id(call), "name": fn.get("name", ""),
                                "input": tool_input(fn.get("arguments"))})
            finish, word = c.finish_reason, c.stop_word
        reason, seq = wire.stop_reason(finish, word, any(b["type"] == "tool_use" for b in content))
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.req.model,
                "content": content, "stop_reason": reason, "stop_sequence": seq,
                "usage": wire.usage_json(comp.usage)}

    # -- streams
    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        usage = wire.usage_json(Usage(prompt_tokens=self.prompt_tokens))  # the gateway's count, until
        # message_delta brings the backend's (cumulative totals: they replace these)
        msg: dict[str, Any] = {"id": self.id, "type": "message", "role": "assistant", "model": self.req.model,
                               "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
        return (event(b"message_start", {"type": "message_start", "message": msg})
                + event(b"ping", {"type": "ping"}))

    def _close(self) -> bytes:
        if not self._open:
            return b""
        self._open = False
        return event(b"content_block_stop", {"type": "content_block_stop", "index": self._block})

    def _begin(self, block: dict[str, Any]) -> bytes:
        out = self._close()
        self._block += 1
        self._open, self._text = True, block["type"] == "text"
        self._thought = block["type"] == "thinking"
        if self._text:
            self._text_head = _text_delta_head(self._block)
        return out + event(b"content_block_start", {"type": "content_block_start", "index": self._block,
                                                     "content_block": block})

    def event(self, ch: Chunk) -> bytes:
        if ch.index != 0:
            return b""
        if (ch.text and self._open and self._text and ch.finish_reason is None
                and not (ch.thinking or ch.reasoning or ch.tool_calls)):
            return self._text_piece(ch.text)  # most of a stream: the open text block's next piece
        out = [self._start()]
        for piece in ch.thinking or ():
            out.append(self._thinking(piece))
        if ch.reasoning and self.req.show_reasoning:
            if not (self._open and self._thought):
                out.append(self._begin(_thought("")))
            out.append(event(b"content_block_delta", {"type": "content_block_delta", "index": self._block,
                                                      "delta": {"type": "thinking_delta",
                                                                "thinking": ch.reasoning}}))
        if ch.text:
            if not (self._open and self._text):
                out.append(self._begin({"type": "text", "text": ""}))
            out.append(self._text_piece(ch.text))
        for n, call in enumerate(ch.tool_calls or ()):
            out.append(self._call(call, n))
        if ch.finish_reason is not None:
            self._finish, self._word = ch.finish_reason, ch.stop_word
        return b"".join(out)

    def _text_piece(self, text: str) -> bytes:
        """The open text block's delta event for ``text``, with no dicts built."""
        return self._text_head + _encode(text) + b"}}\n\n"

    def _thinking(self, piece: dict[str, Any]) -> bytes:
        """A thinking block's start, or its ``thinking_delta`` / ``signature_delta``, as Claude sent it."""
        if piece.get("type") in ("thinking", "redacted_thinking"):
            return self._begin(piece)
        if not (self._open and self._thought):
            return b""  # a delta without its block: nothing to attach it to
        return event(b"content_block_delta", {"type": "content_block_delta", "index": self._block,
                                              "delta": piece})

    def _call(self, call: dict[str, Any], n: int) -> bytes:
        key = call.get("index", ("n", n))
        fn = call.get("function") or {}
        out = b""
        if key not in self._calls:
            if self.one_call and any(b is not None for b in self._calls.values()):
                self._calls[key] = None
                return b""
            out = self._begin({"type": "tool_use", "id": _tool_id(call), "name": fn.get("name") or "",
                               "input": {}})
            self._calls[key] = self._block
        block = self._calls[key]
        args = fn.get("arguments")
        if block is None or not args:
            return out
        if not isinstance(args, str):
            args = json.dumps(args)
        delta = {"type": "input_json_delta", "partial_json": args}
        return out + event(b"content_block_delta", {"type": "content_block_delta", "index": block,
                                                    "delta": delta})

    def closing(self, usage: Usage, last: Chunk | None) -> bytes:
        called = any(b is not None for b in self._calls.values())
        reason, seq = wire.stop_reason(self._finish, self._word, called)
        return (self._start() + self._close()
                + event(b"message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": reason, "stop_sequence": seq},
                                           "usage": wire.usage_json(usage)})
                + event(b"message_stop", {"type": "message_stop"}))

    def error_event(self, body: dict[str, Any]) -> bytes:
        return event(b"error", body)
