"""Bedrock Converse answers read into canonical chunks, whole or as ConverseStream events (the
requests are written in ``converse.py``).

Wire facts (botocore's bedrock-runtime service model): a whole answer's content blocks are
``text``, ``toolUse`` (``input`` an object) and ``reasoningContent`` (``reasoningText`` {text,
signature} or ``redactedContent``, bytes); a stream's ``contentBlockDelta.delta`` is one of
``text``, ``toolUse.input`` (JSON text in pieces) and ``reasoningContent`` (``text``,
``signature`` or ``redactedContent``). ``metadata`` (the usage) comes after ``messageStop``, so
the finish waits for it. ``inputTokens`` excludes cache reads and writes; the canonical
``prompt_tokens`` includes them (OpenAI's meaning).

Reasoning text becomes ``Chunk.reasoning`` (plain text, shown to callers who asked); its signature
and redacted reasoning are not carried: they mean something only to the model that wrote them,
sent back through Converse, which translated callers do not do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from switchyard.core.canonical import Chunk, FinishReason, Usage
from switchyard.providers.turns import dumps
from switchyard.providers.wire import WireError

FINISH: Mapping[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
    "malformed_model_output": "error",
    "malformed_tool_use": "error",
}
# In-stream exceptions (ConverseStreamOutput's error members) another attempt may cure, when
# nothing of the answer has reached the caller yet.
RETRYABLE_EXCEPTIONS = frozenset(
    {"throttlingException", "serviceUnavailableException", "internalServerException"}
)


class _Usage(msgspec.Struct):
    inputTokens: int = 0
    outputTokens: int = 0
    cacheReadInputTokens: int = 0
    cacheWriteInputTokens: int = 0


class _ReasoningText(msgspec.Struct):
    text: str = ""


class _Reasoning(msgspec.Struct):
    """ReasoningContentBlock (whole: ``reasoningText``) and ReasoningContentBlockDelta (stream:
    ``text``); ``signature`` and ``redactedContent`` are not read."""

    reasoningText: _ReasoningText | None = None
    text: str | None = None


class _Block(msgspec.Struct):
    text: str | None = None
    toolUse: dict[str, Any] | None = None
    reasoningContent: _Reasoning | None = None


class _Message(msgspec.Struct):
    content: list[_Block] | None = None


class _Output(msgspec.Struct):
    message: _Message | None = None


class _Answer(msgspec.Struct):
    output: _Output | None = None
    stopReason: str | None = None
    usage: _Usage | None = None


class _Event(msgspec.Struct):
    """Any ConverseStream event's fields (one event has a few of them)."""

    contentBlockIndex: int = 0
    delta: _Block | None = None  # ContentBlockDelta: text, toolUse.input, reasoningContent
    start: dict[str, Any] | None = None
    stopReason: str | None = None
    usage: _Usage | None = None
    message: str | None = None  # an exception's text


_decode_answer = msgspec.json.Decoder(_Answer).decode
_decode_event = msgspec.json.Decoder(_Event).decode


def usage_of(u: _Usage | None) -> Usage | None:
    if u is None:
        return None
    cached, written = u.cacheReadInputTokens, u.cacheWriteInputTokens
    return Usage(
        prompt_tokens=u.inputTokens + cached + written,
        completion_tokens=u.outputTokens,
        cached_tokens=cached,
        cache_write_tokens=written,
    )


def whole(raw: bytes) -> list[Chunk]:
    """A whole Converse answer: one choice."""
    try:
        obj = _decode_answer(raw)
    except msgspec.DecodeError:
        raise WireError("sent a malformed answer") from None
    if obj.output is None or obj.output.message is None:
        raise WireError("sent an answer without an output message")
    text: list[str] = []
    thought: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in obj.output.message.content or ():
        if block.text is not None:
            text.append(block.text)
        elif block.toolUse is not None:
            u = block.toolUse
            calls.append(
                {
                    "index": len(calls),
                    "id": u.get("toolUseId"),
                    "type": "function",
                    "function": {"name": u.get("name"), "arguments": dumps(u.get("input") or {})},
                }
            )
        elif block.reasoningContent is not None and block.reasoningContent.reasoningText is not None:
            thought.append(block.reasoningContent.reasoningText.text)
    return [
        Chunk(
            index=0,
            text="".join(text),
            reasoning="".join(thought),
            role="assistant",
            tool_calls=calls or None,
            finish_reason=FINISH.get(obj.stopReason or "", "stop"),
            usage=usage_of(obj.usage),
        )
    ]


class ConverseStream:
    """One ConverseStream answer, event by event (``name``: the frame's ``:event-type``, or for an
    exception frame its ``:exception-type``). The finish reason waits for ``metadata``."""

    __slots__ = ("_finish", "_sent", "_tools", "done")

    def __init__(self) -> None:
        self.done = False
        self._sent = False  # a chunk went out (the role rides on the first)
        self._finish: FinishReason | None = None
        self._tools: dict[int, int] = {}  # contentBlockIndex -> the tool call's OpenAI index

    def feed(self, name: bytes | None, data: bytes) -> list[Chunk]:
        kind = (name or b"").decode()
        try:
            ev = _decode_event(data) if data else _Event()
        except msgspec.DecodeError:
            raise WireError(f"sent a malformed {kind or 'stream'} event") from None
        out: list[Chunk]
        if kind == "contentBlockDelta" and ev.delta is not None:
            d = ev.delta
            if d.text is not None:
                out = [Chunk(text=d.text)] if d.text else []
            elif d.toolUse is not None:
                k = self._tools.get(ev.contentBlockIndex)
                if k is None:
                    raise WireError("sent tool input for a block that started no tool call")
                out = [
                    Chunk(tool_calls=[{"index": k, "function": {"arguments": d.toolUse.get("input") or ""}}])
                ]
            elif d.reasoningContent is not None and d.reasoningContent.text:
                out = [Chunk(reasoning=d.reasoningContent.text)]
            else:
                out = []  # a reasoning signature or redacted reasoning, citations: not carried
        elif kind == "contentBlockStart" and ev.start is not None and "toolUse" in ev.start:
            u = ev.start["toolUse"]
            k = self._tools[ev.contentBlockIndex] = len(self._tools)
            out = [
                Chunk(
                    tool_calls=[
                        {
                            "index": k,
                            "id": u.get("toolUseId"),
                            "type": "function",
                            "function": {"name": u.get("name"), "arguments": ""},
                        }
                    ]
                )
            ]
        elif kind == "messageStop":
            self._finish = FINISH.get(ev.stopReason or "", "stop")
            return []
        elif kind == "metadata":
            if self._finish is None:
                raise WireError("sent the stream's metadata before its messageStop")
            self.done = True
            out = [Chunk(finish_reason=self._finish, usage=usage_of(ev.usage))]
        elif kind.endswith("Exception"):
            raise WireError(
                f"reported {kind}" + (" mid-stream" if self._sent else ""),
                ev.message,
                retryable=not self._sent and kind in RETRYABLE_EXCEPTIONS,
                status=429 if kind == "throttlingException" and not self._sent else 502,
            )
        else:
            return []  # messageStart, contentBlockStop, and events this gateway does not read
        if out and not self._sent:
            out[0].role = "assistant"
            self._sent = True
        return out

    def ending(self) -> str | None:
        if self.done:
            return None
        if self._finish is not None:
            return "ended the stream after messageStop without its metadata event (the usage)"
        return "ended the stream before it finished"
