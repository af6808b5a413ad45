"""An Anthropic Messages body read into the canonical request (OpenAI-shaped messages).

The table ``ANTHROPIC`` checks every top-level field (types and ranges, for errors and the
OpenAPI schema); ``read_request`` then converts what needs more than one field or the headers:
``system`` and ``messages`` into chat messages, ``tool_choice``, the version's sampling rule.
What a translating backend leaves out because the API makes it optional (thinking,
``context_management``, ``output_config.effort``, ``cache_control``, betas) is collected in
``Native.optional`` for the warning header; what cannot be translated is a 400 naming it. The
caller's bytes ride along in ``Native`` for a deployment that speaks Messages itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from switchyard.core.canonical import CanonicalRequest, Constraint, Native
from switchyard.core.errors import InvalidRequest
from switchyard.dialects import common as c
from switchyard.dialects.anthropic import wire
from switchyard.dialects.spec import (
    BOOL,
    INT,
    LIST,
    NUMBER,
    OBJECT,
    STR,
    STR_OR_LIST,
    Dialect,
    ErrorShape,
    Param,
)

_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
# Claude Code's first system block: Anthropic's billing attribution, different in every
# conversation. A translating backend is better without it: it means nothing to another model and,
# at the head of the prompt, it would defeat that backend's prefix cache.
_BILLING = "x-anthropic-billing-header:"


def _bad(where: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: {what}", param=where)


def _metadata(v: dict[str, Any]) -> str | None:
    uid = v.get("user_id")
    if uid is not None and not isinstance(uid, str):
        raise _bad("metadata.user_id", "must be a string")
    return uid


def _tools(v: list[Any]) -> list[dict[str, Any]]:
    out = []
    for i, t in enumerate(v):
        where = f"tools[{i}]"
        if not isinstance(t, dict):
            raise _bad(where, "must be an object")
        kind = t.get("type")
        if kind not in (None, "custom"):
            raise _bad(f"{where}.type", f"{str(kind)[:64]!r} is one of Anthropic's own tools; only custom "
                       "tools (name, description, input_schema) can be translated for this model")
        name, schema = t.get("name"), t.get("input_schema")
        if not isinstance(name, str) or not name:
            raise _bad(f"{where}.name", "must be a non-empty string")
        if not isinstance(schema, dict):
            raise _bad(f"{where}.input_schema", "must be a JSON schema object")
        fn: dict[str, Any] = {"name": name, "parameters": schema}
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(v: dict[str, Any]) -> tuple[Any, bool | None]:
    """(OpenAI's tool_choice, parallel_tool_calls)."""
    kind = v.get("type")
    parallel = v.get("disable_parallel_tool_use")
    if parallel is not None and not isinstance(parallel, bool):
        raise _bad("tool_choice.disable_parallel_tool_use", "must be a boolean")
    if kind == "tool":
        name = v.get("name")
        if not isinstance(name, str) or not name:
            raise _bad("tool_choice.name", 'is required when tool_choice.type is "tool"')
        choice: Any = {"type": "function", "function": {"name": name}}
    elif isinstance(kind, str) and kind in wire.TOOL_CHOICE:  # (a list or object is no key)
        choice = wire.TOOL_CHOICE[kind]
    else:
        raise _bad("tool_choice.type", f"must be one of auto, any, tool, none (got {str(kind)[:40]!r})")
    return choice, (False if parallel else None)


def _output_config(v: dict[str, Any]) -> tuple[Constraint | None, bool]:
    """(the JSON-schema constraint, whether an effort was asked)."""
    fmt = v.get("format")
    constraint = None
    if fmt is not None:
        if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
            raise _bad("output_config.format.type", 'must be "json_schema"')
        if not isinstance(fmt.get("schema"), dict):
            raise _bad("output_config.format.schema", "must be a JSON schema object")
        constraint = Constraint("json_schema", fmt["schema"])
    effort = v.get("effort")
    if effort is not None and effort not in ("low", "medium", "high", "max"):
        raise _bad("output_config.effort",
                   f"must be one of low, medium, high, max (got {str(effort)[:20]!r})")
    return constraint, effort is not None


def _thinking(v: dict[str, Any]) -> bool:
    """Whether thinking is asked for (``disabled`` asks nothing)."""
    kind = v.get("type")
    if kind not in ("enabled", "disabled", "adaptive"):
        raise _bad("thinking.type", f"must be one of enabled, disabled, adaptive (got {str(kind)[:40]!r})")
    if kind == "enabled" and not (isinstance(v.get("budget_tokens"), int) and v["budget_tokens"] >= 1024):
        raise _bad("thinking.budget_tokens", "must be an integer of at least 1024")
    return kind != "disabled"


def _refused(name: str):
    def parse(_: Any) -> Any:
        raise InvalidRequest(f"{name} is not supported: this gateway's backends cannot run Anthropic's "
                             "server-side features", param=name)
    return parse


ANTHROPIC = Dialect(
    name="anthropic",
    params=(
        c.MODEL,
        Param("messages", "messages", LIST),
        Param("system", "messages", STR_OR_LIST),
        Param("max_tokens", "max_tokens", INT, ge=1),
        c.STREAM,
        Param("temperature", "temperature", NUMBER, ge=0, le=1),
        Param("top_p", "top_p", NUMBER, ge=0, le=1),
        Param("top_k", "top_k", INT, ge=0),
        Param("stop_sequences", "stop", LIST, parse=c.stop_parser("stop_sequences", None)),
        Param("metadata", "user", OBJECT, parse=_metadata),
        Param("tools", "tools", LIST, parse=_tools),
        Param("tool_choice", "tool_choice", OBJECT, parse=_tool_choice),
        Param("output_config", "constraint", OBJECT, parse=_output_config),
        Param("thinking", "(optional)", OBJECT, parse=_thinking),
        Param("context_management", "(optional)", OBJECT),
        Param("service_tier", "(optional)", STR, choices=("auto", "standard_only")),
        Param("mcp_servers", "(refused)", LIST, parse=_refused("mcp_servers")),
        Param("container", "(refused)", parse=_refused("container")),
        Param("inference_geo", "(optional)", STR),
        Param("speed", "(optional)", STR),
        Param("cache_control", "(optional)", OBJECT),
        Param("stream_options", "(optional)", OBJECT),
        Param("disable_parallel_tool_use", "(refused)", BOOL, parse=_refused("disable_parallel_tool_use "
                                                                           "(it belongs in tool_choice)")),
    ),
    errors=ErrorShape(validation_status=400),
    names_stop=True,
)


class _Reader:
    """One request's conversion: the version it speaks and what it leaves out."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.optional: list[str] = []

    def drop(self, name: str) -> None:
        if name not in self.optional:
            self.optional.append(name)

    def messages(self, system: Any, messages: list[Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        text = self.system(system)
        if text:
            out.append({"role": "system", "content": text})
        for i, m in enumerate(messages):
            where = f"messages[{i}]"
            if not isinstance(m, dict):
                raise _bad(where, "must be an object with role and content")
            role, content = m.get("role"), m.get("content")
            if role not in ("user", "assistant", "system"):
                raise _bad(f"{where}.role",
                           f'must be "user", "assistant" or "system" (got {str(role)[:20]!r})')
            if role == "system":  # mid-conversation instructions (Claude Code 2.1 sends them)
                if not isinstance(content, str | list):
                    raise _bad(f"{where}.content", "must be a string or an array of text blocks")
                out.append({"role": "system", "content": self.system(content, f"{where}.content")})
            elif isinstance(content, str):
                out.append({"role": role, "content": content})
            elif not isinstance(content, list):
                raise _bad(f"{where}.content", "must be a string or an array of content blocks")
            elif role == "user":
                out += self.user(where, content)
            else:
                out.append(self.assistant(where, content))
        return out

    def system(self, system: Any, at: str = "system") -> str:
        if system is None or isinstance(system, str):
            return system or ""
        texts = []
        for j, b in enumerate(system):
            where = f"{at}[{j}]"
            if not isinstance(b, dict) or b.get("type") != "text" or not isinstance(b.get("text"), str):
                raise _bad(where, 'must be a {"type": "text", "text": string} block')
            self._cache(b)
            if not b["text"].startswith(_BILLING):
                texts.append(b["text"])
        return "\n\n".join(texts)

    def _cache(self, block: dict[str, Any]) -> None:
        if block.get("cache_control") is not None:
            self.drop("cache_control")

    def _block(self, where: str, b: Any) -> str:
        if not isinstance(b, dict) or not isinstance(b.get("type"), str):
            raise _bad(where, "must be a content block object with a type")
        self._cache(b)
        return b["type"]

    def user(self, where: str, blocks: list[Any]) -> list[dict[str, Any]]:
        """Tool results become ``tool`` messages, first (OpenAI wants them right after the
        assistant's calls); the rest of the turn is one user message after them."""
        tools: list[dict[str, Any]] = []
        parts: list[dict[str, Any]] = []
        for j, b in enumerate(blocks):
            at = f"{where}.content[{j}]"
            kind = self._block(at, b)
            if kind == "tool_result":
                tools.append(self.tool_result(at, b, parts))
            else:
                parts.append(self.part(at, kind, b))
        if parts:
            one = len(parts) == 1 and parts[0]["type"] == "text"
            tools.append({"role": "user", "content": parts[0]["text"] if one else parts})
        return tools

    def part(self, at: str, kind: str, b: dict[str, Any]) -> dict[str, Any]:
        if kind == "text":
            if not isinstance(b.get("text"), str):
                raise _bad(f"{at}.text", "must be a string")
            return {"type": "text", "text": b["text"]}
        if kind == "image":
            return self.image(at, b)
        if kind == "document":
            return self.document(at, b)
        raise _bad(f"{at}.type", f"{kind[:40]!r} blocks cannot be translated for this model")

    def image(self, at: str, b: dict[str, Any]) -> dict[str, Any]:
        src = b.get("source")
        kind = src.get("type") if isinstance(src, dict) else None
        if kind == "base64" and isinstance(src, dict):
            if src.get("media_type") not in _IMAGE_TYPES:
                raise _bad(f"{at}.source.media_type", f"must be one of {', '.join(_IMAGE_TYPES)}")
            if not isinstance(src.get("data"), str):
                raise _bad(f"{at}.source.data", "must be a base64 string")
            url = f"data:{src['media_type']};base64,{src['data']}"
        elif kind == "url" and isinstance(src, dict) and isinstance(src.get("url"), str):
            url = src["url"]
        else:
            raise _bad(f"{at}.source", 'must be {"type": "base64", "media_type", "data"} or '
                       '{"type": "url", "url"} (Files API ids cannot be translated)')
        return {"type": "image_url", "image_url": {"url": url}}

    def document(self, at: str, b: dict[str, Any]) -> dict[str, Any]:
        src = b.get("source")
        kind = src.get("type") if isinstance(src, dict) else None
        if b.get("citations") is not None:
            self.drop("citations")
        title = b.get("title") if isinstance(b.get("title"), str) else None
        if kind == "base64" and isinstance(src, dict) and isinstance(src.get("data"), str):
            if src.get("media_type") != "application/pdf":
                raise _bad(f"{at}.source.media_type", 'must be "application/pdf"')
            return {"type": "file", "file": {"filename": title or "document.pdf",
                                             "file_data": f"data:application/pdf;base64,{src['data']}"}}
        if kind == "text" and isinstance(src, dict) and isinstance(src.get("data"), str):
            return {"type": "text", "text": f"{title}\n\n{src['data']}" if title else src["data"]}
        if kind == "content" and isinstance(src, dict) and isinstance(src.get("content"), str | list):
            inner = src["content"]
            texts = [title] if title else []
            for k, x in enumerate([{"type": "text", "text": inner}] if isinstance(inner, str) else inner):
                where = f"{at}.source.content[{k}]"
                if self._block(where, x) != "text":
                    raise _bad(where, "must be a text block")
                texts.append(self.part(where, "text", x)["text"])
            return {"type": "text", "text": "\n".join(texts)}
        raise _bad(f"{at}.source", "must be a base64 PDF, text or content source (URLs and Files API "
                   "ids cannot be translated for this model)")

    def tool_result(self, at: str, b: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
        tid = b.get("tool_use_id")
        if not isinstance(tid, str) or not tid:
            raise _bad(f"{at}.tool_use_id", "must be a non-empty string")
        content = b.get("content")
        if content is None or isinstance(content, str):
            text = content or ""
        elif isinstance(content, list):
            texts = []
            for k, x in enumerate(content):
                where = f"{at}.content[{k}]"
                kind = self._block(where, x)
                if kind == "text":
                    texts.append(self.part(where, kind, x)["text"])
                elif kind in ("image", "document"):
                    parts.append(self.part(where, kind, x))  # a tool message carries text only
                else:
                    raise _bad(f"{where}.type", f"{kind[:40]!r} blocks cannot be translated for this model")
            text = "\n".join(texts)
        else:
            raise _bad(f"{at}.content", "must be a string or an array of content blocks")
        return {"role": "tool", "tool_call_id": tid, "content": text}

    def assistant(self, where: str, blocks: list[Any]) -> dict[str, Any]:
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for j, b in enumerate(blocks):
            at = f"{where}.content[{j}]"
            kind = self._block(at, b)
            if kind == "text":
                texts.append(self.part(at, kind, b)["text"])
            elif kind == "tool_use":
                calls.append(self.tool_use(at, b))
            elif kind in ("thinking", "redacted_thinking"):
                continue  # earlier turns' reasoning: only a Claude model can read it back
            elif kind == "document" and self.version >= wire.NO_SAMPLING_SINCE:
                raise _bad(f"{at}.type", f"document blocks are not allowed in assistant turns under "
                           f"anthropic-version {self.version}")
            else:
                part = self.part(at, kind, b)
                if part["type"] != "text":
                    raise _bad(f"{at}.type", f"{kind[:40]!r} blocks in assistant turns cannot be "
                               "translated for this model")
                texts.append(part["text"])
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or (None if calls else "")}
        if calls:
            msg["tool_calls"] = calls
        return msg

    def tool_use(self, at: str, b: dict[str, Any]) -> dict[str, Any]:
        tid, name, args = b.get("id"), b.get("name"), b.get("input")
        if not isinstance(tid, str) or not tid:
            raise _bad(f"{at}.id", "must be a non-empty string")
        if not isinstance(name, str) or not name:
            raise _bad(f"{at}.name", "must be a non-empty string")
        if not isinstance(args, dict):
            raise _bad(f"{at}.input", "must be an object")
        return {"id": tid, "type": "function",
                "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


def version_of(headers: Mapping[str, str]) -> str:
    version = headers.get(wire.VERSION_HEADER, "").strip() or wire.DEFAULT_VERSION
    if not wire.VERSION.fullmatch(version):
        raise InvalidRequest(f"{wire.VERSION_HEADER} must be a date such as {wire.DEFAULT_VERSION} "
                             f"(got {version[:40]!r})", param=wire.VERSION_HEADER)
    return version


def read_request(body: Any, headers: Mapping[str, str], *, strict: bool = False,
                 count: bool = False) -> CanonicalRequest:
    """The canonical request of a Messages body (``count``: a count_tokens body, which has no
    ``max_tokens``). Raises InvalidRequest naming the field at fault."""
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object", param="body")
    version = version_of(headers)
    got: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    by_name = ANTHROPIC.by_name
    for name, value in body.items():
        p = by_name.get(name)
        if p is None:
            extra[name] = value
        elif value is not None:
            got[name] = p.read(value)
    if extra and strict:
        names = sorted(extra)
        raise InvalidRequest(f"{names[0]}: Extra inputs are not permitted", param=names[0])
    for name in ("model", "messages") if count else ("model", "messages", "max_tokens"):
        if name not in got:
            raise InvalidRequest(f"{name}: Field required", param=name)
    if version >= wire.NO_SAMPLING_SINCE:
        for name in wire.SAMPLING:
            if name in got:
                raise InvalidRequest(f"{name}: not supported under anthropic-version {version} (send "
                                     f"anthropic-version: {wire.DEFAULT_VERSION} to set it)", param=name)
    reader = _Reader(version)
    messages = reader.messages(got.get("system"), got["messages"])
    if not got["messages"]:
        raise InvalidRequest("messages: at least one message is required", param="messages")
    choice, parallel = got.get("tool_choice", (None, None))
    constraint, effort = got.get("output_config", (None, False))
    # The budget only of enabled thinking (checked there: an integer of at least 1024).
    budget = body["thinking"]["budget_tokens"] if got.get("thinking") and body["thinking"].get(
        "type") == "enabled" else None
    if budget is not None and isinstance(got.get("max_tokens"), int) and got["max_tokens"] <= budget:
        raise InvalidRequest("max_tokens must be greater than thinking.budget_tokens", param="max_tokens")
    if got.get("thinking") and "budget_tokens" in body["thinking"]:
        # Thinking itself is shown where the backend reasons (show_reasoning); its budget is sent
        # only where the backend takes one (reasoning_budget: Gemini, Claude on Bedrock Converse).
        reader.drop(wire.THINKING_BUDGET)
    if effort:
        reader.drop("output_config.effort")
    for name in ("context_management", "service_tier", "inference_geo", "speed", "cache_control"):
        if name in got:
            reader.drop(name)
    for t in body.get("tools") or ():
        reader._cache(t)
    if headers.get(wire.BETA_HEADER):
        reader.drop(wire.BETA_HEADER)
    native = Native("anthropic", body, {k: headers[k] for k in (wire.VERSION_HEADER, wire.BETA_HEADER)
                                        if k in headers}, tuple(reader.optional))
    return CanonicalRequest(
        kind="chat", model=got["model"], dialect="anthropic", messages=messages,
        stream=got.get("stream", False), max_tokens=got.get("max_tokens"),
        temperature=got.get("temperature"), top_p=got.get("top_p"), top_k=got.get("top_k"),
        stop=got.get("stop_sequences"), tools=got.get("tools"),
        tool_choice=choice if "tools" in got else None,  # without tools there is nothing to choose
        parallel_tool_calls=parallel if "tools" in got else None, user=got.get("metadata"),
        constraint=constraint, extra=extra, native=native, show_reasoning=bool(got.get("thinking")),
        reasoning_budget=budget)
