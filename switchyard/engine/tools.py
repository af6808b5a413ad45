"""Tool calling on the engine: OpenAI ``tools`` / ``tool_choice`` for models whose chat template
has no tool format of its own (SmolLM2's has none).

One documented format, Hermes' (also Qwen2.5's): the offered functions go into the system
prompt inside ``<tools></tools>``, the model answers each call as
``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, and tool results come back
as user turns inside ``<tool_response></tool_response>``. ``tool_choice`` "required" or a named
function constrains the output to one such call (llguidance: the function's ``parameters``
schema); "auto" leaves the model free and parses what it writes; "none" offers nothing.
Imports no torch: the gateway side (``ToolCallParser``, ``prepare``) and the engine process
(``render_messages``) both use it.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any, Literal

from switchyard.core.canonical import CanonicalRequest, Chunk, Constraint, replace
from switchyard.core.errors import InvalidRequest

OPEN, CLOSE = "<tool_call>", "</tool_call>"
SYSTEM = (
    "You are a function calling AI model. You may call one or more functions to assist with the "
    "user query. Function signatures are given within <tools></tools> XML tags:\n<tools>\n{tools}\n"
    "</tools>\nFor each function call, return a json object with the function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)
# Compact JSON in constrained calls, as for json_schema constraints (see constraints.py).
_COMPACT = {"whitespace_flexible": False}


@dataclass(frozen=True)
class ToolPlan:
    functions: list[dict[str, Any]]  # {"name", "description"?, "parameters"?}, as offered
    mode: Literal["auto", "required"]  # a named tool_choice is "required" with that one function
    names: frozenset[str]  # every offered name (a named choice still shows all of them)


def plan(req: CanonicalRequest) -> ToolPlan | None:
    """Validate ``tools`` and ``tool_choice``; None when no function is offered."""
    choice = req.tool_choice
    if not req.tools:
        if req.tools is not None and not isinstance(req.tools, list):
            raise InvalidRequest("tools must be an array of function tools", param="tools")
        if choice not in (None, "none"):
            raise InvalidRequest("tool_choice needs tools", param="tool_choice")
        return None
    functions = [_function(i, t) for i, t in enumerate(req.tools)]
    names = frozenset(f["name"] for f in functions)
    if choice is None or choice == "auto":
        return ToolPlan(functions, "auto", names)
    if choice == "none":
        return None
    if choice == "required":
        return ToolPlan(functions, "required", names)
    fn = choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise InvalidRequest('tool_choice must be "none", "auto", "required" or '
                             '{"type": "function", "function": {"name": ...}}', param="tool_choice")
    if name not in names:
        raise InvalidRequest(f"tool_choice names function {name!r}, which is not in tools",
                             param="tool_choice")
    return ToolPlan([f for f in functions if f["name"] == name], "required", names)


def _function(i: int, tool: Any) -> dict[str, Any]:
    fn = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise InvalidRequest(f'tools[{i}] must be {{"type": "function", "function": {{"name": ...}}}}',
                             param=f"tools[{i}]")
    params = fn.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise InvalidRequest(f"tools[{i}].function.parameters must be a JSON schema object",
                             param=f"tools[{i}]")
    return {k: fn[k] for k in ("name", "description", "parameters") if fn.get(k) is not None}


def prepare(req: CanonicalRequest) -> tuple[CanonicalRequest, ToolPlan | None]:
    """Gateway side, before the engine sees the request: validate, and for a required call put
    its grammar in place as the request's constraint (on a copy: a retry elsewhere sees the
    caller's own request)."""
    p = plan(req) if req.kind == "chat" else None
    if p is None or p.mode == "auto":
        return req, p
    if req.constraint is not None:
        raise InvalidRequest("a required tool call cannot be combined with response_format or "
                             "another output constraint", param="tool_choice")
    return replace(req, constraint=constraint(p)), p


def constraint(p: ToolPlan) -> Constraint:
    """Exactly one call to one of ``p.functions``, its arguments valid for its schema. Arguments
    get no properties beyond the declared ones unless the schema says otherwise (a small model
    otherwise pads them with junk keys; what it writes stays valid for the caller's schema)."""
    options = [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                "properties": {"name": {"const": f["name"]}, "arguments": _closed(f.get("parameters"))}}
               for f in p.functions]
    schema = {"x-guidance": _COMPACT, "anyOf": options}
    return Constraint("lark", f'start: "{OPEN}\\n" call "\\n{CLOSE}"\ncall: %json {json.dumps(schema)}')


def _closed(schema: dict[str, Any] | None) -> dict[str, Any]:
    if not schema:
        return {"type": "object"}
    if "properties" in schema and "additionalProperties" not in schema:
        return {**schema, "additionalProperties": False}
    return schema


# --- prompts ---------------------------------------------------------------------------------


def render_messages(messages: list[dict[str, Any]], p: ToolPlan | None) -> list[dict[str, Any]]:
    """Messages with string contents (see prompts.template_messages) in the Hermes format: the
    functions in the system prompt, assistant calls as <tool_call> text, tool results as user
    turns. OpenAI's "developer" role (newer SDKs send it for instructions) is the system role."""
    out = []
    for m in messages:
        role, text = m["role"], m["content"]
        if role == "developer":
            role = "system"
        elif role == "assistant" and m.get("tool_calls"):
            calls = [_call_text(c) for c in m["tool_calls"]]
            text = "\n".join(([text] if text else []) + calls)
        elif role == "tool":
            role, text = "user", f"<tool_response>\n{text}\n</tool_response>"
        out.append({"role": role, "content": text})
    if p is not None:
        tools = "\n".join(json.dumps({"type": "function", "function": f}, ensure_ascii=False)
                          for f in p.functions)
        block = SYSTEM.format(tools=tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def _call_text(call: Any) -> str:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise InvalidRequest("an assistant tool_calls entry must have function.name", param="messages")
    args = fn.get("arguments", "{}")
    try:
        parsed = json.loads(args) if isinstance(args, str) else args
    except ValueError:
        parsed = args  # kept as the caller wrote it
    return f"{OPEN}\n{json.dumps({'name': fn['name'], 'arguments': parsed}, ensure_ascii=False)}\n{CLOSE}"


# --- answers ---------------------------------------------------------------------------------


class ToolCallParser:
    """One choice's output, streamed: text outside <tool_call> blocks is content, each block is
    a call in OpenAI's shape. Text that may still begin a block is held back, and so is trailing
    whitespace until more text comes: whitespace next to a call is dropped."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self.buf = ""
        self.in_call = False
        self.ws = ""  # whitespace-only content waiting for more
        self.calls = 0

    def feed(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        self.buf += text
        out: list[str] = []
        calls: list[dict[str, Any]] = []
        while True:
            if self.in_call:
                j = self.buf.find(CLOSE)
                if j < 0:
                    break
                body, self.buf, self.in_call = self.buf[:j], self.buf[j + len(CLOSE):], False
                parsed = self._parse(body)
                if parsed is None:  # not a call after all: the model's text, as written
                    out.append(self._content(OPEN + body + CLOSE))
                else:
                    self.ws = ""
                    calls += parsed
                continue
            i = self.buf.find(OPEN)
            if i >= 0:
                out.append(self._content(self.buf[:i]))
                self.buf, self.in_call = self.buf[i + len(OPEN):], True
                continue
            keep = _partial_suffix(self.buf, OPEN)
            out.append(self._content(self.buf[: len(self.buf) - keep]))
            self.buf = self.buf[len(self.buf) - keep:]
            break
        return "".join(out), calls

    def finish(self) -> str:
        """What is still held back, as content (an unfinished block is the model's text)."""
        rest = (OPEN if self.in_call else "") + self.buf
        self.buf, self.in_call = "", False
        text = self._content(rest)
        if not self.calls:
            text, self.ws = text + self.ws, ""
        return text

    def _content(self, text: str) -> str:
        """Content up to its trailing whitespace, which waits (a call may follow)."""
        text = self.ws + text
        shown = text.rstrip()
        self.ws = text[len(shown):]
        return shown

    def _parse(self, body: str) -> list[dict[str, Any]] | None:
        try:
            value = json.loads(body)
        except ValueError:
            return None
        items = value if isinstance(value, list) else [value]
        if not items or not all(isinstance(v, dict) and v.get("name") in self.names for v in items):
            return None
        out = []
        for v in items:
            args = v.get("arguments", {})
            out.append({"index": self.calls, "id": "call_" + secrets.token_hex(12), "type": "function",
                        "function": {"name": v["name"], "arguments": args if isinstance(args, str)
                                     else json.dumps(args, ensure_ascii=False)}})
            self.calls += 1
        return out


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that begins ``marker``."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


class ToolCallStream:
    """Rewrites an engine's chat chunks: content outside calls, calls as ``tool_calls``, and
    finish_reason "tool_calls" for a choice that stopped after making one."""

    def __init__(self, p: ToolPlan) -> None:
        self.plan = p
        self.parsers: dict[int, ToolCallParser] = {}
        self.tokens: dict[int, int] = {}  # counted in a chunk that had nothing to show

    def rewrite(self, ch: Chunk) -> Chunk | None:
        """The chunk to pass on, or None when it holds nothing to show yet."""
        parser = self.parsers.get(ch.index)
        if parser is None:
            parser = self.parsers[ch.index] = ToolCallParser(self.plan.names)
        text, calls = parser.feed(ch.text)
        if ch.finish_reason is not None:
            text += parser.finish()
            if parser.calls and ch.finish_reason == "stop":
                ch.finish_reason = "tool_calls"
        ch.text, ch.tool_calls = text, calls or None
        if ch.tokens is not None:
            ch.tokens += self.tokens.pop(ch.index, 0)
        if (text or calls or ch.finish_reason is not None or ch.usage is not None or ch.role
                or ch.logprobs):
            return ch
        if ch.tokens:
            self.tokens[ch.index] = ch.tokens
        return None
