"""OpenAI's ``/v1/chat/completions`` (with vLLM's sampling extras), as callers send it and as
every upstream dialect receives it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from switchyard.core.errors import InvalidRequest
from switchyard.dialects import common as c
from switchyard.dialects import constraints as k
from switchyard.dialects.reasoning import EFFORTS, VERBOSITIES
from switchyard.dialects.spec import BOOL, INT, LIST, OBJECT, STR, Dialect, Emit, ErrorShape, Param


def _messages(v: list[Any]) -> list[dict[str, Any]]:
    if not v:
        raise InvalidRequest("messages must not be empty", param="messages")
    for i, m in enumerate(v):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise InvalidRequest(f"messages[{i}] must be an object with a role", param=f"messages[{i}]")
        _content(m.get("content"), f"messages[{i}].content")
    return v


def _content(content: Any, where: str) -> None:
    """A message's content: null, a string, or a list of parts whose ``text`` (when present) is a
    string. Checked here, before anything counts or forwards it."""
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InvalidRequest(f"{where} must be a string or a list of content parts", param=where)
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise InvalidRequest(f"{where}[{j}] must be an object (a content part)", param=f"{where}[{j}]")
        if "text" in part and not isinstance(part["text"], str):
            raise InvalidRequest(f"{where}[{j}].text must be a string", param=f"{where}[{j}].text")


CHAT = Dialect(
    name="chat",
    params=(c.MODEL, c.STREAM, c.STREAM_OPTIONS, c.TEMPERATURE, c.TOP_P, c.N, c.PRESENCE, c.FREQUENCY,
            c.SEED, c.USER, c.LOGIT_BIAS, c.TOOLS, c.TOOL_CHOICE, c.stop(4), c.MIN_P, c.REPETITION,
            c.IGNORE_EOS, c.INCLUDE_STOP,
            Param("top_k", "top_k", INT, ge=-1),
            Param("messages", "messages", LIST, parse=_messages),
            Param("max_tokens", "max.max_tokens", INT, ge=1),
            Param("max_completion_tokens", "max.max_completion_tokens", INT, ge=1),
            Param("logprobs", "lp.enabled", BOOL),
            Param("top_logprobs", "lp.top", INT, ge=0, le=20),
            Param("response_format", "constraint.rf", OBJECT, parse=k.response_format),
            Param("guided_json", "constraint.json", (dict, str), parse=k.json_schema("guided_json")),
            Param("guided_regex", "constraint.regex", STR, parse=k.regex("guided_regex")),
            Param("guided_choice", "constraint.choice", LIST, parse=k.choice("guided_choice")),
            Param("guided_grammar", "constraint.grammar", STR, parse=k.gbnf("guided_grammar")),
            # OpenAI's reasoning controls: carried where the upstream takes them (dialects/reasoning.py)
            Param("reasoning_effort", "reasoning_effort", STR, choices=EFFORTS),
            Param("verbosity", "verbosity", STR, choices=VERBOSITIES)),
    errors=ErrorShape(validation_status=400),
)

_COMPLETION_ONLY = ("echo", "suffix", "best_of", "logprobs", "stop", "max_tokens")


def _chat_logprobs(top: int) -> dict[str, Any]:
    return {"logprobs": True, "top_logprobs": top} if top else {"logprobs": True}


# Each dialect's, made once (4 us a chat request otherwise), by identity: a Dialect holds dicts,
# so it is not hashable.
_CHAT_EMITS: dict[int, tuple[Dialect, dict[str, Emit]]] = {}


def chat_emits(upstream: Dialect) -> Mapping[str, Emit]:
    """What an upstream of dialect ``upstream`` accepts on its chat endpoint: its own sampling
    names, with the message-shaped fields OpenAI's chat API defines."""
    made = _CHAT_EMITS.get(id(upstream))
    if made is not None and made[0] is upstream:
        return made[1]
    emits = _chat_emits(upstream)
    _CHAT_EMITS[id(upstream)] = (upstream, emits)
    return emits


def _chat_emits(upstream: Dialect) -> dict[str, Emit]:
    emits = {f: e for f, e in upstream.emits.items() if f not in _COMPLETION_ONLY}
    emits.update(c.plain("tools", "tool_choice", "parallel_tool_calls", "stop"))
    emits["max_tokens"] = c.OPENAI_EMITS["max_tokens"]
    emits["logprobs"] = _chat_logprobs
    if upstream.name in ("openai", "fireworks"):
        emits["constraint"] = k.emit_openai_chat
    return emits
