"""Where a canonical request holds text a guard reads: every message's content (strings and the
``text`` of content parts: user, system, assistant and tool messages, so system prompts and tool
results too), every tool call's arguments, completion prompts and their suffix, and embeddings
inputs. Each dialect's parser has already put its text in these places (``core.canonical``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from switchyard.core.canonical import CanonicalRequest, Prompt, replace

Edit = Callable[[str], str]  # a text -> the text to send (the same object when unchanged)


def rewrite(req: CanonicalRequest, edit: Edit) -> CanonicalRequest:
    """``req`` with ``edit`` applied to each of its texts; ``req`` itself when none changed. A
    changed request drops its native body: the upstream must be sent the edited text."""
    changes: dict[str, Any] = {}
    if req.messages is not None:
        messages = [_message(m, edit) for m in req.messages]
        if any(a is not b for a, b in zip(messages, req.messages, strict=True)):
            changes["messages"] = messages
    if req.prompt is not None:
        prompt = [_prompt(p, edit) for p in req.prompt]
        if any(a is not b for a, b in zip(prompt, req.prompt, strict=True)):
            changes["prompt"] = prompt
    if req.suffix:
        suffix = edit(req.suffix)
        if suffix is not req.suffix:
            changes["suffix"] = suffix
    if not changes:
        return req
    return replace(req, **changes, native=None)


def _message(m: dict[str, Any], edit: Edit) -> dict[str, Any]:
    out = m
    content = m.get("content")
    if isinstance(content, str):
        new = edit(content)
        if new is not content:
            out = {**m, "content": new}
    elif isinstance(content, list):
        parts = [_part(p, edit) for p in content]
        if any(a is not b for a, b in zip(parts, content, strict=True)):
            out = {**m, "content": parts}
    calls = m.get("tool_calls")
    if isinstance(calls, list):
        new_calls = [_call(c, edit) for c in calls]
        if any(a is not b for a, b in zip(new_calls, calls, strict=True)):
            out = {**out, "tool_calls": new_calls}
    return out


def _part(p: Any, edit: Edit) -> Any:
    if isinstance(p, dict) and isinstance(p.get("text"), str):
        new = edit(p["text"])
        if new is not p["text"]:
            return {**p, "text": new}
    return p


def _call(c: Any, edit: Edit) -> Any:
    fn = c.get("function") if isinstance(c, dict) else None
    if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
        new = edit(fn["arguments"])
        if new is not fn["arguments"]:
            return {**c, "function": {**fn, "arguments": new}}
    return c


def _prompt(p: Prompt, edit: Edit) -> Prompt:
    if isinstance(p, str):
        return edit(p)
    if any(isinstance(t, str) for t in p):
        mixed: list[int | str] = [edit(t) if isinstance(t, str) else t for t in p]
        if any(a is not b for a, b in zip(mixed, p, strict=True)):
            return mixed
    return p


def texts(req: CanonicalRequest) -> list[str]:
    """Every text ``rewrite`` would edit, in order (webhooks and tests read them)."""
    seen: list[str] = []

    def note(t: str) -> str:
        seen.append(t)
        return t

    rewrite(req, note)
    return seen


def put(req: CanonicalRequest, new: list[str]) -> CanonicalRequest:
    """``req`` with its texts (as ``texts`` lists them) replaced by ``new``, in order."""
    given = iter(new)
    return rewrite(req, lambda _t: next(given))
