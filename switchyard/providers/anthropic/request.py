"""A canonical request as an Anthropic Messages body, from the turns ``turns.read_turns`` reads
(the one reader of canonical messages, as for Converse and Gemini).

System messages go to the top-level ``system``; assistant tool calls become ``tool_use`` blocks
and tool messages ``tool_result`` blocks in a user turn (consecutive turns of one role merged by
``turns.alternate``: the API wants the results of a turn's tool calls in the very next message).
What the API lacks is emulated (stop strings kept in the text; echo by the driver) or refused
naming the caller's own field.
"""

from __future__ import annotations

from typing import Any

from switchyard.core.canonical import UNLIMITED, CanonicalRequest
from switchyard.core.deployments import DeploymentConfig
from switchyard.dialects.anthropic.wire import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_VERSION,
    NO_SAMPLING_SINCE,
    SAMPLING,
    TOOL_CHOICE_OF,
)
from switchyard.dialects.reasoning import claude_thinking
from switchyard.providers.emulation import Emulation
from switchyard.providers.turns import Turn, alternate, read_turns, refuse, stops, tool_plan

# Canonical fields handled below or by the driver; any other field the caller set is refused.
_HANDLED = frozenset({"max_tokens", "stop", "include_stop_str_in_output", "echo", "tools", "tool_choice",
                      "user", "constraint", "include_usage", "timeout", "extra_params", "extra_headers",
                      "n", "best_of", *SAMPLING})
# Asks for what the upstream does anyway, or changes nothing in the output.
_NO_OPS = {"cache_prompt": lambda v: True, "overflow": lambda v: v == "error"}


PROVIDER = "Anthropic"


def render(req: CanonicalRequest, model: str, dep: DeploymentConfig) -> tuple[dict[str, Any], Emulation]:
    emulation = Emulation()
    for field, value in req.said().items():
        if field in _HANDLED:
            continue
        no_op = _NO_OPS.get(field)
        if no_op is None or not no_op(value):
            raise refuse(req, field, PROVIDER, "it has no logprobs" if field == "logprobs" else "")
    if (req.n or 1) > 1 or (req.best_of or 1) > 1:  # the router fans these out (Caps)
        raise refuse(req, "n", PROVIDER)
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
                raise refuse(req, field, PROVIDER,
                             f"at anthropic-version {version}, which has no sampling fields")
            body[field] = v
    if (sent := stops(req, emulation)) is not None:  # else the gateway stops, keeping the string
        body["stop_sequences"] = sent
    tools, choice = _tools(req)
    if tools:
        body["tools"] = tools
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
            raise refuse(req, "constraint", PROVIDER, f"no {c.kind} constraints")
    if req.user is not None:
        body["metadata"] = {"user_id": req.user}
    if req.stream:
        body["stream"] = True
    if req.extra_params:  # checked against the deployment's allow-list by the driver
        body.update({k: v for k, v in req.extra_params.items() if k not in body})
    return body, emulation


def _tools(req: CanonicalRequest) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The tools and tool_choice (``turns.tool_plan`` checks them against each other)."""
    fns, mode, name = tool_plan(req)
    tools = [{"name": f["name"], **({"description": f["description"]} if f.get("description") else {}),
              "input_schema": f.get("parameters") or {"type": "object", "properties": {}}} for f in fns]
    choice: dict[str, Any] | None = None
    if req.tool_choice is not None:
        choice = {"type": "tool", "name": name} if mode == "tool" else dict(TOOL_CHOICE_OF[mode])
    parallel = req.extra.get("parallel_tool_calls") if req.extra else None
    if parallel is False and (choice is None or choice["type"] != "none"):
        choice = choice or {"type": "auto"}
        choice["disable_parallel_tool_use"] = True
    return tools, choice


def _messages(req: CanonicalRequest) -> tuple[Any, list[dict[str, Any]]]:
    """The system text and the messages, read once by ``turns.read_turns`` (as for Converse and
    Gemini) and merged into alternating roles by ``turns.alternate``."""
    if req.kind == "completion" and req.suffix is not None:
        raise refuse(req, "suffix", PROVIDER)
    system, turns = read_turns(req, PROVIDER, image_urls=True)
    if req.kind == "completion":  # one text prompt (read_turns checked it), sent as the content
        return None, [{"role": "user", "content": (req.prompt or [""])[0]}]
    sys_out: Any = None
    if system:
        sys_out = system[0] if len(system) == 1 else [{"type": "text", "text": t} for t in system]
    return sys_out, alternate(turns, lambda t: "assistant" if t.role == "assistant" else "user", _blocks)


def _blocks(t: Turn) -> list[dict[str, Any]]:
    if t.role == "tool":
        text = "".join(v for k, v in t.parts if k == "text")
        return [{"type": "tool_result", "tool_use_id": t.call_id or "", "content": text}]
    out: list[dict[str, Any]] = []
    for kind, value in t.parts:
        if kind == "text":
            out.append({"type": "text", "text": value})
        elif kind == "image":
            mime, data = value
            out.append({"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}})
        else:
            out.append({"type": "image", "source": {"type": "url", "url": value}})
    return out + [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.args} for c in t.calls]
