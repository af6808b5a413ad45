"""A canonical request as an Anthropic Messages body.

System messages go to the top-level ``system``; assistant tool calls become ``tool_use`` blocks
and tool messages ``tool_result`` blocks in a user turn (consecutive turns of one role merged:
the API wants the results of a turn's tool calls in the very next message). What the API lacks is
emulated (stop strings kept in the text; echo by the driver) or refused naming the caller's own field.
"""

from __future__ import annotations

import json
from typing import Any

from switchyard.core.canonical import UNLIMITED, CanonicalRequest
from switchyard.core.deployments import DeploymentConfig
from switchyard.core.errors import InvalidRequest
from switchyard.dialects.anthropic.wire import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_VERSION,
    NO_SAMPLING_SINCE,
    SAMPLING,
    TOOL_CHOICE_OF,
)
from switchyard.dialects.defaults import sampling_defaults
from switchyard.dialects.reasoning import claude_thinking
from switchyard.dialects.registry import caller_param
from switchyard.providers.emulation import Emulation

# Canonical fields handled below or by the driver; any other field the caller set is refused.
_HANDLED = frozenset({"max_tokens", "stop", "include_stop_str_in_output", "echo", "tools", "tool_choice",
                      "user", "constraint", "include_usage", "timeout", "extra_params", "extra_headers",
                      "n", "best_of", *SAMPLING})
# Asks for what the upstream does anyway, or changes nothing in the output.
_NO_OPS = {"cache_prompt": lambda v: True, "overflow": lambda v: v == "error"}


def refuse(req: CanonicalRequest, field: str, why: str = "") -> InvalidRequest:
    name = caller_param(req, field)
    return InvalidRequest(f"{name} is not supported by model {req.model}: its upstream speaks "
                          f"Anthropic's Messages API{why}", param=name)


def render(req: CanonicalRequest, model: str, dep: DeploymentConfig) -> tuple[dict[str, Any], Emulation]:
    emulation = Emulation()
    for field, value in req.said().items():
        if field in _HANDLED:
            continue
        no_op = _NO_OPS.get(field)
        if no_op is None or not no_op(value):
            raise refuse(req, field, " (it has no logprobs)" if field == "logprobs" else "")
    if (req.n or 1) > 1 or (req.best_of or 1) > 1:  # the router fans these out (Caps)
        raise refuse(req, "n")
    system, messages = _messages(req)
    body: dict[str, Any] = {"model": model}
    if system:
        body["system"] = system
    body["messages"] = messages
    mt = req.max_tokens
    body["max_tokens"] = DEFAULT_MAX_TOKENS if mt is None or mt == UNLIMITED else mt
    if thinking := claude_thinking(req, model, body["max_tokens"]):  # a reasoning effort's budget
        body["thinking"] = thinking
    version = dep.api_version or DEFAULT_VERSION
    for field in SAMPLING:
        v = getattr(req, field)
        if v is not None:
            if version >= NO_SAMPLING_SINCE:
                raise refuse(req, field, f" at anthropic-version {version}, which has no sampling fields")
            body[field] = v
    if req.stop:
        want = req.include_stop_str_in_output
        if want is None:
            want = bool(sampling_defaults(req.dialect).get("include_stop_str_in_output"))
        if want:  # the API drops the stop string: the gateway stops and keeps it
            emulation.stop, emulation.include_stop = list(req.stop), True
        else:
            body["stop_sequences"] = list(req.stop)
    if req.tools:
        body["tools"] = [_tool(req, t) for t in req.tools]
    choice = _tool_choice(req)
    if choice is not None:
        body["tool_choice"] = choice
    if req.constraint is not None:
        c = req.constraint
        if c.kind == "json_schema":
            # the constraint is the bare schema (every inbound reader unwraps its own envelope)
            body["output_config"] = {"format": {"type": "json_schema", "schema": c.value}}
        elif c.kind == "json_object":  # no JSON mode: any object, as a schema
            body["output_config"] = {"format": {"type": "json_schema", "schema": {"type": "object"}}}
        else:
            raise refuse(req, "constraint", f" (no {c.kind} constraints)")
    if req.user is not None:
        body["metadata"] = {"user_id": req.user}
    if req.stream:
        body["stream"] = True
    if req.extra_params:  # checked against the deployment's allow-list by the driver
        body.update({k: v for k, v in req.extra_params.items() if k not in body})
    return body, emulation


def _tool(req: CanonicalRequest, tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool.get("function") if tool.get("type", "function") == "function" else None
    if not isinstance(fn, dict) or not fn.get("name"):
        raise refuse(req, "tools", f" (only function tools; got type {tool.get('type')!r})")
    out: dict[str, Any] = {"name": fn["name"]}
    if fn.get("description"):
        out["description"] = fn["description"]
    out["input_schema"] = fn.get("parameters") or {"type": "object", "properties": {}}
    return out


def _tool_choice(req: CanonicalRequest) -> dict[str, Any] | None:
    tc = req.tool_choice
    parallel = req.extra.get("parallel_tool_calls") if req.extra else None
    choice: dict[str, Any] | None
    if tc is None:
        choice = None
    elif isinstance(tc, str):
        if tc not in TOOL_CHOICE_OF:
            raise refuse(req, "tool_choice", f" (no {tc!r})")
        choice = dict(TOOL_CHOICE_OF[tc])
    elif isinstance(tc, dict) and isinstance(tc.get("function"), dict) and tc["function"].get("name"):
        choice = {"type": "tool", "name": tc["function"]["name"]}
    else:
        raise refuse(req, "tool_choice")
    if parallel is False and (choice is None or choice["type"] != "none"):
        choice = choice or {"type": "auto"}
        choice["disable_parallel_tool_use"] = True
    return choice


def _messages(req: CanonicalRequest) -> tuple[Any, list[dict[str, Any]]]:
    if req.kind == "completion":
        prompts = req.prompt or [""]
        if len(prompts) != 1 or not isinstance(prompts[0], str):
            raise InvalidRequest(f"model {req.model} takes one text prompt per call (its upstream speaks "
                                 "Anthropic's Messages API)", param="prompt")
        if req.suffix is not None:
            raise refuse(req, "suffix")
        return None, [{"role": "user", "content": prompts[0]}]
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for i, m in enumerate(req.messages or []):
        role = m.get("role")
        if role in ("system", "developer"):
            system.extend(_blocks(req, m.get("content"), i))
            continue
        if role == "tool":
            blocks = [{"type": "tool_result", "tool_use_id": m.get("tool_call_id") or "",
                       "content": _text_of(m.get("content"))}]
            role = "user"
        elif role == "assistant":
            blocks = _blocks(req, m.get("content"), i)
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    raise InvalidRequest(f"messages[{i}].tool_calls: arguments are not JSON",
                                         param=f"messages[{i}].tool_calls") from None
                blocks.append({"type": "tool_use", "id": call.get("id") or "", "name": fn.get("name") or "",
                               "input": args})
        elif role == "user":
            blocks = _blocks(req, m.get("content"), i)
        else:
            raise InvalidRequest(f"messages[{i}].role {role!r} is not supported by model {req.model}",
                                 param=f"messages[{i}].role")
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    sys_out: Any = None
    if system:
        sys_out = system[0]["text"] if len(system) == 1 else system
    return sys_out, out


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _blocks(req: CanonicalRequest, content: Any, i: int) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    out: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            out.append({"type": "text", "text": part.get("text", "")})
        elif kind == "image_url":
            url = (part.get("image_url") or {}).get("url", "")
            if url.startswith("data:") and ";base64," in url:
                media, data = url[5:].split(";base64,", 1)
                out.append({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}})
            else:
                out.append({"type": "image", "source": {"type": "url", "url": url}})
        else:
            raise InvalidRequest(f"messages[{i}].content: part type {kind!r} is not supported by model "
                                 f"{req.model}", param=f"messages[{i}].content")
    return out
