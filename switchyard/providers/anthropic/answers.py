"""Anthropic answers as canonical chunks: a whole ``Message``, and the named-event stream.

Usage follows OpenAI's meaning: Anthropic's ``input_tokens`` excludes the cache, so the prompt is
input + cache reads + cache writes. In a stream the input side comes with ``message_start`` and
the cumulative output with each ``message_delta``; the usage is reported once, whole, with the
finish. Tool-call deltas are keyed by their content block's ``index`` so parallel calls keep their
own ids and arguments. Thinking blocks (their tokens count in output_tokens) are relayed only on the
native lane (``thinking``: an Anthropic caller, who must send them back with their signatures).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from switchyard.core.canonical import Chunk, FinishReason, Usage
from switchyard.dialects.anthropic.wire import FINISH_REASON, RETRYABLE_ERRORS, usage_of
from switchyard.providers.wire import WireError

_decode = msgspec.json.decode


def finish_of(reason: Any) -> FinishReason | None:
    if reason is None:
        return None
    return FINISH_REASON.get(reason, "stop")


def error_of(obj: Any) -> tuple[str, str | None]:
    """(type, message) of an Anthropic error object ``{"type": "error", "error": {...}}``."""
    return _error_fields(obj.get("error") if isinstance(obj, dict) else None)


def _error_fields(err: Any) -> tuple[str, str | None]:
    if not isinstance(err, dict):
        return "error", None
    return str(err.get("type") or "error"), (str(err["message"]) if err.get("message") else None)


_THINKING = ("thinking", "redacted_thinking")


def whole(raw: bytes, *, thinking: bool = False) -> list[Chunk]:
    try:
        obj = _decode(raw)
    except msgspec.DecodeError:
        raise WireError("sent a malformed answer") from None
    if not isinstance(obj, dict):
        raise WireError("sent a malformed answer")
    if obj.get("type") == "error":  # nothing of it reached the caller: an overload may go elsewhere
        kind, said = error_of(obj)
        retry = kind in RETRYABLE_ERRORS
        raise WireError(f"answered 200 with an error ({kind})", said, retryable=retry,
                        status=503 if retry else 502)
    content = obj.get("content")
    if not isinstance(content, list):
        raise WireError("sent an answer without content")
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    thought: list[dict[str, Any]] = []
    for block in content:
        btype = block.get("type") if isinstance(block, dict) else None
        if btype in _THINKING and thinking:
            thought.append(block)
        elif btype == "text":
            text.append(block.get("text") or "")
        elif btype == "tool_use":
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block.get("name"),
                                       "arguments": json.dumps(block.get("input") or {})}})
    ch = Chunk(index=0, text="".join(text), role="assistant", tool_calls=calls or None,
               finish_reason=finish_of(obj.get("stop_reason")) or "stop", usage=usage_of(obj.get("usage")),
               thinking=thought or None)
    if obj.get("stop_reason") == "stop_sequence" and isinstance(obj.get("stop_sequence"), str):
        ch.stop_word = obj["stop_sequence"]
    return [ch]


class _Delta(msgspec.Struct, omit_defaults=True):
    """A content block's delta (text, tool input, thinking, its signature), or ``message_delta``'s."""

    type: Any = None
    text: Any = None
    partial_json: Any = None
    thinking: Any = None
    signature: Any = None
    stop_reason: Any = None
    stop_sequence: Any = None


class _Event(msgspec.Struct):
    """A stream event, decoded into fields: most are text deltas, and a Struct reads them without
    building a dict for the event and another for its delta. What is relayed or read as a whole
    (a block's start, the message, usage, an error) stays as sent."""

    type: Any = None
    index: int | None = None  # a content block's (a key of ``tools``: never a list or an object)
    delta: _Delta | None = None
    content_block: Any = None
    message: Any = None
    usage: Any = None
    error: Any = None


_NO_DELTA = _Delta()
_decode_event = msgspec.json.Decoder(_Event).decode
_as_sent = msgspec.to_builtins  # a thinking delta as Claude wrote it (its fields, no defaults)


class MessageStream:
    """One streamed answer: message_start, content_block_start/delta/stop, message_delta,
    message_stop (the end), ping, error."""

    __slots__ = ("done", "finish", "sent", "started", "thinking", "tools", "usage")

    def __init__(self, *, thinking: bool = False) -> None:
        self.thinking = thinking  # relay thinking blocks (the native lane)
        self.done = False
        self.started = False
        self.sent = False  # content reached the chunks: a later error is no longer retryable
        self.usage: Usage | None = None
        self.tools: dict[int, int] = {}  # content block index -> tool call index (OpenAI's)
        self.finish: FinishReason | None = None

    def _chunk(self, **kw: Any) -> Chunk:
        if not self.sent:
            self.sent = True
            kw["role"] = "assistant"
        return Chunk(index=0, **kw)

    def feed(self, name: bytes | None, data: bytes) -> list[Chunk]:
        try:
            ev = _decode_event(data)
        except msgspec.DecodeError:  # (not JSON, or not an object of these fields' shapes)
            raise WireError("sent a malformed stream event") from None
        kind = ev.type
        if kind == "content_block_delta":
            d = ev.delta or _NO_DELTA
            dk = d.type
            if dk == "text_delta":  # most of a stream: no keywords on this path
                text = d.text
                if not text:
                    return []
                return [Chunk(0, text) if self.sent else self._chunk(text=text)]
            if dk == "input_json_delta":
                i = self.tools.get(-1 if ev.index is None else ev.index)
                if i is None or not d.partial_json:
                    return []
                return [self._chunk(tool_calls=[{"index": i, "function": {"arguments": d.partial_json}}])]
            if dk in ("thinking_delta", "signature_delta") and self.thinking:
                return [self._chunk(thinking=[_as_sent(d)])]
            return []  # citation deltas, and thinking off the native lane, are not relayed
        if kind == "content_block_start":
            b = ev.content_block if isinstance(ev.content_block, dict) else {}
            if b.get("type") == "tool_use":
                i = self.tools[len(self.tools) if ev.index is None else ev.index] = len(self.tools)
                return [self._chunk(tool_calls=[{"index": i, "id": b.get("id"), "type": "function",
                                                 "function": {"name": b.get("name"), "arguments": ""}}])]
            if b.get("type") == "text" and b.get("text"):
                return [self._chunk(text=b["text"])]
            if b.get("type") in _THINKING and self.thinking:
                return [self._chunk(thinking=[b])]
            return []
        if kind == "message_start":
            self.started = True
            msg = ev.message if isinstance(ev.message, dict) else {}
            self.usage = usage_of(msg.get("usage"))
            return []
        if kind == "message_delta":
            self.usage = usage_of(ev.usage, self.usage)
            d = ev.delta or _NO_DELTA
            if d.stop_reason is not None:
                self.finish = finish_of(d.stop_reason)
                ch = self._chunk(finish_reason=self.finish, usage=self.usage)
                if d.stop_reason == "stop_sequence":
                    ch.stop_word = d.stop_sequence
                return [ch]
            return []
        if kind == "message_stop":
            self.done = True
            return []
        if kind == "error":
            etype, said = _error_fields(ev.error)
            if not self.sent and etype in RETRYABLE_ERRORS:
                # Nothing reached the caller: another deployment may serve it (Anthropic sends
                # overloads as 200 + an error event).
                raise WireError(f"reported {etype} before any content", said, retryable=True, status=503)
            raise WireError(f"reported an error mid-stream ({etype})", said)
        return []  # ping, content_block_stop, and event types added later

    def ending(self) -> str | None:
        if not self.started:
            return "sent a stream without any event"
        if self.finish is None:
            return "ended the stream before it finished"
        return None
