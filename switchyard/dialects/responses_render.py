"""Answers to ``/v1/responses``: ``response`` objects, and streams as the Responses event sequence.

A stream is a small state machine over canonical chunks: the backend's reasoning (when the
caller asked for a reasoning summary) opens a ``reasoning`` item with one ``summary_text`` part,
text opens a ``message`` item (with one ``output_text`` part), each tool call index opens a
``function_call`` item; items close in order at the end, then ``response.completed``
(``response.incomplete`` when max_output_tokens cut it) carries the whole response with its
usage. Every event has its ``sequence_number``, as the openai SDK's models require. A failure
after the stream began is an ``error`` event, then ``response.failed``.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from switchyard.core.canonical import CanonicalRequest, Chunk, Completion, Usage
from switchyard.core.ids import hex_id
from switchyard.dialects.render import Renderer

_encode = msgspec.json.encode


def responses_usage(u: Usage) -> dict[str, Any]:
    return {"input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens,
                                     "cache_write_tokens": u.cache_write_tokens},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
            "total_tokens": u.total_tokens}


# What the answer says of a field of the request the caller did not send (OpenAI's defaults).
_UNSENT: dict[str, Any] = {
    "instructions": None, "max_output_tokens": None, "temperature": None, "top_p": None, "user": None,
    "safety_identifier": None, "reasoning": None, "metadata": {}, "tool_choice": "auto", "tools": [],
    "parallel_tool_calls": True, "text": {"format": {"type": "text"}}}


def _id(prefix: str) -> str:
    return prefix + hex_id(12)


def merge_calls(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat tool-call deltas (or whole calls) -> whole calls in index order."""
    calls: dict[int, dict[str, Any]] = {}
    for i, d in enumerate(deltas):
        idx = d.get("index", i if "index" not in d and d.get("id") else 0)
        fn = d.get("function") or {}
        call = calls.get(idx)
        if call is None:
            calls[idx] = {"id": d.get("id") or _id("call_"), "name": fn.get("name") or "",
                          "arguments": fn.get("arguments") or ""}
        else:
            call["name"] = call["name"] or fn.get("name") or ""
            call["arguments"] += fn.get("arguments") or ""
    return [calls[i] for i in sorted(calls)]


class ResponsesRenderer(Renderer):
    object_name = "response"
    id_prefix = "resp_"

    def __init__(self, req: CanonicalRequest, prompt_tokens: int = 0) -> None:
        super().__init__(req, prompt_tokens)
        self._seq = 0
        self._began = False
        self._items: list[dict[str, Any]] = []  # output items, in output order
        self._text: dict[str, Any] | None = None  # the open message item
        self._thought: dict[str, Any] | None = None  # the open reasoning item
        self._calls: dict[int, dict[str, Any]] = {}  # open function_call items by tool call index
        self._finish: str | None = None

    # -- the response object
    def _response(self, status: str, output: list[dict[str, Any]], usage: Usage | None = None,
                  error: dict[str, Any] | None = None) -> dict[str, Any]:
        """The response object; what OpenAI repeats of the request is the caller's own (``as_sent``),
        with OpenAI's defaults for what it did not send."""
        echo = self.req.as_sent or {}
        out: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "background": False, "error": error,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "model": self.req.model, "output": output, "previous_response_id": None, "store": False,
            **_UNSENT, **echo, "usage": responses_usage(usage) if usage is not None else None}
        if status == "completed":
            out["completed_at"] = int(time.time())
        return out

    def completion(self, comp: Completion) -> dict[str, Any]:
        c = comp.choices[0] if comp.choices else None
        output: list[dict[str, Any]] = []
        if c is not None and c.reasoning and self.req.show_reasoning:
            output.append(_reasoning(_id("rs_"), c.reasoning, "completed"))
        if c is not None and (c.text or not c.tool_calls):
            output.append(_message(_id("msg_"), c.text, "completed"))
        for call in merge_calls(c.tool_calls or []) if c is not None else ():
            output.append(_function_call(_id("fc_"), call, "completed"))
        status = "incomplete" if c is not None and c.finish_reason == "length" else "completed"
        return self._response(status, output, comp.usage)

    # -- streams
    def _sse(self, event: dict[str, Any]) -> bytes:
        event["sequence_number"] = self._seq
        self._seq += 1
        return b"event: " + event["type"].encode() + b"\ndata: " + _encode(event) + b"\n\n"

    def _begin(self) -> list[bytes]:
        if self._began:
            return []
        self._began = True
        return [self._sse({"type": t, "response": self._response("in_progress", [])})
                for t in ("response.created", "response.in_progress")]

    def _open_text(self) -> list[bytes]:
        closed = self._close_reasoning()  # reasoning comes before the answer it led to
        item = self._text = {"id": _id("msg_"), "type": "message", "status": "in_progress",
                             "role": "assistant", "content": [], "_parts": []}
        return [*closed, self._added(item),
                self._sse({"type": "response.content_part.added", "item_id": item["id"],
                           "output_index": item["_index"], "content_index": 0, "part": _part("")})]

    def _reasoning_delta(self, text: str) -> list[bytes]:
        """The backend's reasoning as a ``reasoning`` item's one summary part, streamed."""
        out = []
        item = self._thought
        if item is None:
            item = self._thought = {**_reasoning(_id("rs_"), "", "in_progress"), "summary": [], "_parts": []}
            out.append(self._added(item))
            out.append(self._sse({"type": "response.reasoning_summary_part.added", "item_id": item["id"],
                                  "output_index": item["_index"], "summary_index": 0,
                                  "part": _summary("")}))
        item["_parts"].append(text)
        out.append(self._sse({"type": "response.reasoning_summary_text.delta", "item_id": item["id"],
                              "output_index": item["_index"], "summary_index": 0, "delta": text}))
        return out

    def _close_reasoning(self) -> list[bytes]:
        item, self._thought = self._thought, None
        if item is None:
            return []
        text = "".join(item.pop("_parts"))
        item["summary"] = [_summary(text)]
        item["status"] = "completed"
        at = {"item_id": item["id"], "output_index": item["_index"], "summary_index": 0}
        return [self._sse({"type": "response.reasoning_summary_text.done", **at, "text": text}),
                self._sse({"type": "response.reasoning_summary_part.done", **at, "part": _summary(text)}),
                self._sse({"type": "response.output_item.done", "output_index": item["_index"],
                           "item": _public(item)})]

    def event(self, ch: Chunk) -> bytes:
        out = self._begin()
        if ch.reasoning and self.req.show_reasoning:
            out += self._reasoning_delta(ch.reasoning)
        if ch.text:
            if self._text is None:
                out += self._open_text()
            assert self._text is not None
            self._text["_parts"].append(ch.text)
            out.append(self._sse({"type": "response.output_text.delta", "item_id": self._text["id"],
                                  "output_index": self._text["_index"], "content_index": 0,
                                  "delta": ch.text, "logprobs": []}))
        for i, d in enumerate(ch.tool_calls or ()):
            out += self._call_delta(d.get("index", i), d)
        if ch.finish_reason:
            self._finish = ch.finish_reason
        return b"".join(out)

    def _added(self, item: dict[str, Any]) -> bytes:
        item["_index"] = len(self._items)
        self._items.append(item)
        return self._sse({"type": "response.output_item.added", "output_index": item["_index"],
                          "item": _public(item)})

    def _call_delta(self, idx: int, d: dict[str, Any]) -> list[bytes]:
        out = []
        fn = d.get("function") or {}
        item = self._calls.get(idx)
        if item is None:
            out += self._close_reasoning() + self._close_text()  # what came before a call is finished
            item = self._calls[idx] = _function_call(
                _id("fc_"), {"id": d.get("id") or _id("call_"), "name": fn.get("name") or "",
                             "arguments": ""}, "in_progress")
            out.append(self._added(item))
        args = fn.get("arguments")
        if args:
            item["arguments"] += args
            out.append(self._sse({"type": "response.function_call_arguments.delta", "item_id": item["id"],
                                  "output_index": item["_index"], "delta": args}))
        return out

    def _close_text(self) -> list[bytes]:
        item, self._text = self._text, None
        if item is None:
            return []
        text = "".join(item.pop("_parts"))
        item["content"] = [_part(text)]
        item["status"] = "completed"
        at = {"item_id": item["id"], "output_index": item["_index"], "content_index": 0}
        return [self._sse({"type": "response.output_text.done", **at, "text": text, "logprobs": []}),
                self._sse({"type": "response.content_part.done", **at, "part": _part(text)}),
                self._sse({"type": "response.output_item.done", "output_index": item["_index"],
                           "item": _public(item)})]

    def _close_calls(self) -> list[bytes]:
        out = []
        for item in self._calls.values():
            item["status"] = "completed"
            out.append(self._sse({"type": "response.function_call_arguments.done", "item_id": item["id"],
                                  "output_index": item["_index"], "name": item["name"],
                                  "arguments": item["arguments"]}))
            out.append(self._sse({"type": "response.output_item.done", "output_index": item["_index"],
                                  "item": _public(item)}))
        self._calls = {}
        return out

    def closing(self, usage: Usage, last: Chunk | None) -> bytes:
        out = self._begin()
        if not self._items or self._items == [self._thought]:  # an answer has a message, empty or not
            out += self._open_text()
        out += self._close_reasoning() + self._close_text() + self._close_calls()
        status = "incomplete" if self._finish == "length" else "completed"
        out.append(self._sse({"type": f"response.{status}",
                              "response": self._response(status, [_public(i) for i in self._items], usage)}))
        return b"".join(out)

    def error_event(self, body: dict[str, Any]) -> bytes:
        err = body.get("error") or {}
        out = self._begin()
        out.append(self._sse({"type": "error", "code": err.get("code") or err.get("type"),
                              "message": err.get("message", "upstream failure"), "param": err.get("param")}))
        failed = self._response("failed", [_public(i) for i in self._items],
                                error={"code": "server_error", "message": err.get("message", "")})
        out.append(self._sse({"type": "response.failed", "response": failed}))
        return b"".join(out)


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _summary(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


def _reasoning(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "status": status, "summary": [_summary(text)]}


def _message(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant",
            "content": [_part(text)]}


def _function_call(item_id: str, call: dict[str, Any], status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "status": status, "call_id": call["id"],
            "name": call["name"], "arguments": call["arguments"]}


def _public(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if not k.startswith("_")}
