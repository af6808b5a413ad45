"""What the native codecs (Anthropic Messages, Bedrock Converse, Gemini) share, written once: the
canonical request read as turns (system text apart, content parts, tool calls with parsed
arguments) and merged into the alternating roles these APIs want, the tool declarations and
tool_choice checked, stop sequences sent or emulated, and the refusal of what a vendor cannot
carry, in the caller's own field names."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.errors import InvalidRequest
from switchyard.dialects.defaults import sampling_defaults
from switchyard.dialects.registry import caller_param
from switchyard.providers.emulation import Emulation

# Fields no codec sends (the gateway handles them) or that change nothing an upstream sees.
ENVELOPE = frozenset(
    {"include_usage", "timeout", "extra_headers", "include_stop_str_in_output", "stop", "cache_prompt"}
)


def text_inputs(req: CanonicalRequest, who: str) -> list[str]:
    """An embeddings request's inputs as text, for an API that embeds text only (``who``, e.g.
    "model google/embed (its upstream is gemini)"): a token-id array is a 400 naming ``input``."""
    texts: list[str] = []
    for i, p in enumerate(req.prompt or ()):
        if not isinstance(p, str):
            raise InvalidRequest(f"input[{i}] is a token-id array; {who} embeds text only", param="input")
        texts.append(p)
    return texts


def refuse(req: CanonicalRequest, fld: str, provider: str, why: str = "") -> InvalidRequest:
    name = caller_param(req, fld)
    return InvalidRequest(
        f"{name} is not supported by model {req.model}: its upstream is {provider}"
        + (f" ({why})" if why else ""),
        param=name,
    )


def check_fields(req: CanonicalRequest, carried: Iterable[str], provider: str) -> None:
    """Refuse every field the caller set that the provider neither carries nor ignores harmlessly."""
    ok = ENVELOPE.union(carried)
    for fld, value in req.said().items():
        if fld in ok:
            continue
        if fld == "best_of" and value <= (req.n or 1):
            continue
        if fld == "n" and value == 1:
            continue
        if fld == "overflow" and value == "error":
            continue  # the upstream's own answer to an overflow is an error
        if fld == "extra_params":
            raise refuse(req, fld, provider, "extra parameters pass only to OpenAI-shaped upstreams")
        raise refuse(req, fld, provider)


def stops(req: CanonicalRequest, emulation: Emulation) -> list[str] | None:
    """The stop sequences to send natively (None: none, or the gateway applies them itself because
    the caller wants the stop string kept in the text, which these vendors never do)."""
    if not req.stop:
        return None
    keep = req.include_stop_str_in_output
    if keep is None:
        keep = bool(sampling_defaults(req.dialect).get("include_stop_str_in_output"))
    if keep:
        emulation.stop, emulation.include_stop = list(req.stop), True
        return None
    return list(req.stop)


@dataclass(slots=True)
class Call:
    id: str
    name: str
    args: Any  # the parsed arguments (an object)


@dataclass(slots=True)
class Turn:
    """One message: ``role`` user, assistant or tool; ``parts`` ("text", str), ("image", (mime,
    base64)) or, where the vendor fetches images itself, ("image_url", url); an assistant's
    ``calls``; a tool result's ``call_id`` and ``name``."""

    role: str
    parts: list[tuple[str, Any]] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    call_id: str | None = None
    name: str | None = None


def one_prompt(req: CanonicalRequest, upstream: str) -> str:
    """A completion's prompt for a chat API, which takes one text a call (the router fans several
    out: the row's ``Caps.prompts``)."""
    prompts = req.prompt or []
    if len(prompts) != 1 or not isinstance(prompts[0], str):
        raise InvalidRequest(f"model {req.model} takes one text prompt per call (its upstream is "
                             f"{upstream}, a chat API)", param="prompt")
    return prompts[0]


def read_turns(req: CanonicalRequest, provider: str, *,
               image_urls: bool = False) -> tuple[list[str], list[Turn]]:
    """The system texts and the other turns of a chat request; a completion's prompt is one user
    turn (chat-only vendors). ``image_urls``: the vendor fetches http(s) images itself (Anthropic);
    else only ``data:`` URLs are taken."""
    if req.kind == "completion":
        return [], [Turn("user", [("text", one_prompt(req, provider))])]
    system: list[str] = []
    turns: list[Turn] = []
    names: dict[str, str] = {}  # tool call id -> function name (Gemini answers by name)
    for i, m in enumerate(req.messages or []):
        role = m.get("role")
        where = f"messages[{i}]"
        if role in ("system", "developer"):
            parts = _parts(m.get("content"), where, provider, image_urls)
            text = "".join(t for kind, t in parts if kind == "text")
            if text:
                system.append(text)
        elif role in ("user", "assistant"):
            t = Turn(role, _parts(m.get("content"), where, provider, image_urls))
            for j, tc in enumerate(m.get("tool_calls") or []):
                fn = tc.get("function") or {}
                t.calls.append(
                    Call(
                        str(tc.get("id") or f"call_{i}_{j}"),
                        str(fn.get("name") or ""),
                        _args(fn.get("arguments"), f"{where}.tool_calls[{j}].function.arguments"),
                    )
                )
                names[t.calls[-1].id] = t.calls[-1].name
            turns.append(t)
        elif role in ("tool", "function"):
            cid = str(m.get("tool_call_id") or "")
            turns.append(
                Turn(
                    "tool",
                    _parts(m.get("content"), where, provider, image_urls),
                    call_id=cid,
                    name=m.get("name") or names.get(cid) or "",
                )
            )
        else:
            raise InvalidRequest(
                f"{where}.role {role!r} is not supported by model {req.model}", param=f"{where}.role"
            )
    return system, turns


def _parts(content: Any, where: str, provider: str, image_urls: bool) -> list[tuple[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [("text", content)] if content else []
    out: list[tuple[str, Any]] = []
    for j, p in enumerate(content if isinstance(content, list) else [content]):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind == "text":
            if p.get("text"):
                out.append(("text", str(p["text"])))
        elif kind == "image_url":
            url = (
                (p.get("image_url") or {}).get("url")
                if isinstance(p.get("image_url"), dict)
                else p.get("image_url")
            )
            url = str(url or "")
            if image_urls and not url.startswith("data:"):
                out.append(("image_url", url))
            else:
                out.append(("image", data_url(url, f"{where}.content[{j}].image_url.url", provider)))
        else:
            raise InvalidRequest(
                f"{where}.content[{j}]: a {kind!r} part is not supported by a {provider} "
                "upstream (text and image_url are)",
                param=f"{where}.content[{j}].type",
            )
    return out


def data_url(url: str, param: str, provider: str) -> tuple[str, str]:
    """(mime type, base64 data) of a ``data:`` URL; the gateway fetches nothing on a caller's behalf."""
    head, sep, data = url.partition(",")
    if not url.startswith("data:") or not sep or not head.endswith(";base64"):
        raise InvalidRequest(
            f"{param}: a {provider} upstream takes images inline only, as data:<mime>;base64,<data> URLs",
            param=param,
        )
    return head[5:-7], data


def _args(raw: Any, param: str) -> Any:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        raise InvalidRequest(f"{param} is not valid JSON", param=param) from None
    if not isinstance(value, dict):
        raise InvalidRequest(f"{param} must be a JSON object", param=param)
    return value


def tool_functions(req: CanonicalRequest) -> list[dict[str, Any]]:
    """The function declarations of ``tools`` (OpenAI shape), checked."""
    out = []
    for i, t in enumerate(req.tools or []):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not fn.get("name") or t.get("type", "function") != "function":
            raise InvalidRequest(f"tools[{i}] must be a function tool with a name", param=f"tools[{i}]")
        out.append(fn)
    return out


def choice_of(req: CanonicalRequest) -> tuple[str, str | None]:
    """``tool_choice`` as (mode, name): auto, none, required, or ("tool", name)."""
    tc = req.tool_choice
    if tc is None or tc == "auto":
        return "auto", None
    if tc in ("none", "required"):
        return tc, None
    if isinstance(tc, dict):
        name = (tc.get("function") or {}).get("name") if tc.get("type", "function") == "function" else None
        if name:
            return "tool", str(name)
    raise InvalidRequest(
        f"tool_choice {tc!r} is not one of auto, none, required or a named function", param="tool_choice"
    )


def tool_plan(req: CanonicalRequest) -> tuple[list[dict[str, Any]], str, str | None]:
    """The function declarations and tool_choice as (mode, name), checked against each other: a
    choice that asks for a call needs tools, and a named function must be one of them."""
    fns = tool_functions(req)
    mode, name = choice_of(req)
    if not fns and mode in ("required", "tool"):
        raise InvalidRequest("tool_choice asks for a tool call but tools lists none", param="tool_choice")
    if mode == "tool" and name not in {f["name"] for f in fns}:
        raise InvalidRequest(f"tool_choice names {name!r}, which is not in tools", param="tool_choice")
    return fns, mode, name


def alternate(turns: list[Turn], role_of: Callable[[Turn], str],
              blocks_of: Callable[[Turn], list[dict[str, Any]]],
              key: str = "content") -> list[dict[str, Any]]:
    """The vendor's messages, ``{"role": role_of(turn), key: blocks}``: these APIs alternate roles,
    so consecutive turns of one role merge (a turn's tool results go in the next user message)
    and a turn with no blocks is left out."""
    out: list[dict[str, Any]] = []
    for t in turns:
        blocks = blocks_of(t)
        if not blocks:
            continue
        role = role_of(t)
        if out and out[-1]["role"] == role:
            out[-1][key] += blocks
        else:
            out.append({"role": role, key: blocks})
    return out


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
