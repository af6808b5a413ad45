"""OpenAI's ``/v1/responses``, stateless: read into a canonical *chat* request, so it reaches every
backend (OpenAI-family upstreams get chat completions, the engine gets chat).

Rows read the fields that map one to one; ``prepare`` does what rows cannot: ``instructions`` and
``input`` items become chat messages, function tools become chat tools, and what no backend runs
(hosted tools, encrypted reasoning items) is left out and named, with why, in
the ``x-switchyard-warning`` header rather than refused, since a 400 there stops clients such as
Codex. What OpenAI's answer repeats of the request (``_ECHOED``) rides along as sent.
Nothing is stored: the features that need a store are refused with a 400 naming the field.
"""

from __future__ import annotations

from typing import Any

from switchyard.core.errors import InvalidRequest
from switchyard.dialects import common as c
from switchyard.dialects import constraints as k
from switchyard.dialects.reasoning import EFFORTS, VERBOSITIES
from switchyard.dialects.spec import INT, LIST, OBJECT, Dialect, ErrorShape, Param

# Need a store of earlier responses: refused, naming the field.
_STATEFUL = {"previous_response_id": "previous_response_id needs a stored response",
             "conversation": "conversation needs stored conversations",
             "prompt": "prompt templates need stored prompts"}
# Bookkeeping that changes no output: accepted silently (nothing is stored whatever ``store`` says).
_QUIET = frozenset({"store", "metadata", "prompt_cache_key", "prompt_cache_retention", "safety_identifier",
                    "service_tier", "client_metadata", "stream_options", "truncation"})
# Accepted but not run by a chat backend: left out, each named in the warning with why.
_LEFT_OUT = {"max_tool_calls": "not enforced by this gateway",
             "top_logprobs": "not sent to the backend"}
# What OpenAI's answer repeats of the request, as the caller sent it.
_ECHOED = ("instructions", "metadata", "temperature", "top_p", "max_output_tokens", "tool_choice", "tools",
           "parallel_tool_calls", "text", "user", "safety_identifier", "reasoning")
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal", "summary_text"})
# Tools that run on OpenAI's side (the caller only names them): no backend here runs them.
# (The openai SDK's ``responses.Tool`` union, less function, custom and namespace.)
_HOSTED = frozenset({"web_search", "web_search_2025_08_26", "web_search_preview",
                     "web_search_preview_2025_03_11", "file_search", "computer", "computer_use_preview",
                     "code_interpreter", "programmatic_tool_calling", "image_generation", "mcp",
                     "local_shell", "shell", "apply_patch", "tool_search"})
# Items that a chat backend has no use for (hosted tool calls, reasoning): left out, named.
_SKIPPED_ITEMS = frozenset({"reasoning", "web_search_call", "file_search_call", "computer_call",
                            "computer_call_output", "image_generation_call", "code_interpreter_call",
                            "local_shell_call", "local_shell_call_output", "mcp_call", "mcp_list_tools",
                            "mcp_approval_request", "mcp_approval_response", "compaction",
                            "shell_call", "shell_call_output", "apply_patch_call",
                            "apply_patch_call_output", "tool_search_call", "tool_search_output"})


def prepare(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the body the rows read, the canonical ``as_sent`` and ``left_out``). ``input`` and
    ``instructions`` merge into one ``input`` of chat messages; tools into chat tools."""
    for name, why in _STATEFUL.items():
        if body.get(name) is not None:
            raise InvalidRequest(f"{name} is not supported: this gateway's Responses API is stateless "
                                 f"({why}); send the whole conversation in input", param=name)
    if body.get("background"):
        raise InvalidRequest("background is not supported: this gateway's Responses API is stateless "
                             "(background responses must be stored); set it to false", param="background")
    _check_echoed(body)
    out: dict[str, Any] = {}
    left_out: list[str] = []
    for name, value in body.items():
        if name in _QUIET or name == "background" or name in _STATEFUL or name == "reasoning":
            continue
        if name in _LEFT_OUT or name == "include":
            if value not in (None, [], {}):
                left_out += _include(value) if name == "include" else [f"{name}: {_LEFT_OUT[name]}"]
            continue
        out[name] = value
    instructions = out.pop("instructions", None)
    if body.get("input") is not None:
        out["input"] = _messages(instructions, body["input"], left_out)
    if isinstance(body.get("tools"), list):
        out["tools"] = _tools(body["tools"], left_out)
    # true is every backend's default; false cannot be sent on
    if "parallel_tool_calls" in out and out.pop("parallel_tool_calls") is False:
        left_out.append("parallel_tool_calls: false not sent to the backend")
    as_sent = {name: body[name] for name in _ECHOED if body.get(name) is not None}
    # A summary asked for: the backend's own reasoning text, where it writes one.
    summary = body.get("reasoning") and (body["reasoning"].get("summary") or body["reasoning"].get(
        "generate_summary"))
    return out, {"as_sent": as_sent, "left_out": tuple(left_out), "show_reasoning": bool(summary),
                 **_controls(body)}


def _controls(body: dict[str, Any]) -> dict[str, Any]:
    """``reasoning.effort`` and ``text.verbosity``, as the canonical reasoning controls (carried
    where a backend takes them: switchyard/dialects/reasoning.py)."""
    out = {}
    for where, field, name, allowed in (("reasoning", "effort", "reasoning_effort", EFFORTS),
                                        ("text", "verbosity", "verbosity", VERBOSITIES)):
        value = (body.get(where) or {}).get(field) if isinstance(body.get(where), dict) else None
        if value is None:
            continue
        if value not in allowed:
            raise InvalidRequest(f"{where}.{field} must be one of {list(allowed)} (got {str(value)[:40]!r})",
                                 param=f"{where}.{field}")
        out[name] = value
    return out


def _check_echoed(body: dict[str, Any]) -> None:
    """The echoed fields no row reads: of the types OpenAI's answer holds them in."""
    meta = body.get("metadata")
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise InvalidRequest("metadata must be an object of string values", param="metadata")
    if body.get("safety_identifier") is not None and not isinstance(body["safety_identifier"], str):
        raise InvalidRequest("safety_identifier must be a string", param="safety_identifier")
    if body.get("reasoning") is not None and not isinstance(body["reasoning"], dict):
        raise InvalidRequest("reasoning must be an object", param="reasoning")
    if body.get("parallel_tool_calls") is not None and not isinstance(body["parallel_tool_calls"], bool):
        raise InvalidRequest("parallel_tool_calls must be a boolean", param="parallel_tool_calls")


def _include(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise InvalidRequest("include must be an array of strings", param="include")
    out = []
    for i, name in enumerate(value):
        if not isinstance(name, str):
            raise InvalidRequest(f"include[{i}] must be a string", param=f"include[{i}]")
        what = ("encrypted reasoning not produced by this gateway" if name == "reasoning.encrypted_content"
                else "not produced by this gateway")
        out.append(f"include[{i}] ({name[:64]}): {what}")
    return out


# --- input items -> chat messages ------------------------------------------------------------


def _messages(instructions: Any, items: Any, left_out: list[str]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    if instructions is not None:
        if isinstance(instructions, str):
            if instructions:
                msgs.append({"role": "system", "content": instructions})
        elif isinstance(instructions, list):
            msgs += _items(instructions, left_out, "instructions")
        else:
            raise InvalidRequest("instructions must be a string or an array of input items",
                                 param="instructions")
    if isinstance(items, str):
        msgs.append({"role": "user", "content": items})
    elif isinstance(items, list):
        msgs += _items(items, left_out, "input")
    else:
        raise InvalidRequest("input must be a string or an array of input items", param="input")
    if not any(m["role"] != "system" for m in msgs):
        raise InvalidRequest("input must contain at least one message", param="input")
    return msgs


def _items(items: list[Any], left_out: list[str], where: str) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"{at} must be an object", param=at)
        t = item.get("type", "message")
        if t == "message":
            given = item.get("role")
            role = _ROLES.get(given) if isinstance(given, str) else None
            if role is None:
                raise InvalidRequest(f"{at}.role must be one of user, assistant, system, developer",
                                     param=f"{at}.role")
            msgs.append({"role": role, "content": _content(item.get("content"), f"{at}.content")})
        elif t in ("function_call", "custom_tool_call"):
            _call(msgs, item, at, custom=t == "custom_tool_call")
        elif t in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidRequest(f"{at}.call_id must be a string", param=f"{at}.call_id")
            msgs.append({"role": "tool", "tool_call_id": call_id,
                         "content": _content(item.get("output"), f"{at}.output")})
        elif t == "item_reference":
            raise InvalidRequest(f"{at}: item_reference is not supported (this gateway's Responses API is"
                                 " stateless; send the item itself)", param=at)
        elif isinstance(t, str) and t in _SKIPPED_ITEMS:
            left_out.append(f"{at} ({t}): " + ("reasoning not sent back to the backend" if t == "reasoning"
                                               else "hosted tool item not read by this gateway"))
        else:
            raise InvalidRequest(f"{at}.type {str(t)[:40]!r} is not a known input item type",
                                 param=f"{at}.type")
    return msgs


def _call(msgs: list[dict[str, Any]], item: dict[str, Any], at: str, *, custom: bool) -> None:
    """A tool call the model made earlier: it joins the assistant message before it, as chat
    carries calls (one assistant message, its text and its calls)."""
    name, call_id = item.get("name"), item.get("call_id")
    args = item.get("input" if custom else "arguments")
    for field, v in (("name", name), ("call_id", call_id), ("input" if custom else "arguments", args)):
        if not isinstance(v, str):
            raise InvalidRequest(f"{at}.{field} must be a string", param=f"{at}.{field}")
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
    last = msgs[-1] if msgs else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
        if not last.get("content"):
            last["content"] = None
    else:
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _content(content: Any, at: str) -> Any:
    """A string, or parts: text parts joined into one string (every backend reads that), images as
    chat ``image_url`` parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"{at} must be a string or an array of content parts", param=at)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise InvalidRequest(f"{at}[{j}] must be an object", param=f"{at}[{j}]")
        t = part.get("type")
        if isinstance(t, str) and t in _TEXT_PARTS:
            text = part.get("text", part.get("refusal"))
            if not isinstance(text, str):
                raise InvalidRequest(f"{at}[{j}].text must be a string", param=f"{at}[{j}].text")
            parts.append({"type": "text", "text": text})
        elif t == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise InvalidRequest(f"{at}[{j}].image_url must be a URL or data URL (file_id needs "
                                     "stored files)", param=f"{at}[{j}].image_url")
            image: dict[str, Any] = {"url": url}
            if isinstance(part.get("detail"), str):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise InvalidRequest(f"{at}[{j}].type must be input_text, output_text or input_image "
                                 f"(got {str(t)[:40]!r})", param=f"{at}[{j}].type")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


# --- tools -------------------------------------------------------------------------------------


def _tools(tools: list[Any], left_out: list[str]) -> list[dict[str, Any]]:
    """Function tools as chat tools; a hosted tool (``web_search``, ``mcp`` ...) runs on OpenAI's
    side and another kind (Codex's ``namespace``, ``custom``) has no chat form: left out, named."""
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise InvalidRequest(f"tools[{i}] must be an object", param=f"tools[{i}]")
        kind = tool.get("type")
        if kind != "function":
            what = ("hosted tool not run" if isinstance(kind, str) and kind in _HOSTED
                    else "tool type not translated")
            left_out.append(f"tools[{i}] ({str(kind)[:40]}): {what} by this gateway")
            continue
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"tools[{i}].name must be a string", param=f"tools[{i}].name")
        fn: dict[str, Any] = {"name": name}
        for field in ("description", "parameters", "strict"):
            if tool.get(field) is not None:
                fn[field] = tool[field]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(v: Any) -> Any:
    if v in ("auto", "none", "required"):
        return v
    if isinstance(v, dict):
        if v.get("type") == "function" and isinstance(v.get("name"), str):
            return {"type": "function", "function": {"name": v["name"]}}
        if v.get("type") == "allowed_tools":
            return v.get("mode") if v.get("mode") in ("auto", "required") else "auto"
        return "auto"  # a hosted tool's choice: its tool was left out
    raise InvalidRequest("tool_choice must be auto, none, required or {type: function, name}",
                         param="tool_choice")


def _text(v: dict[str, Any]) -> Any:
    """``text.format``: ``{type: text | json_object | json_schema, name, schema, strict}``."""
    fmt = v.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or "type" not in fmt:
        raise InvalidRequest("text.format must be an object with a type", param="text.format")
    if fmt["type"] == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise InvalidRequest("text.format.schema must be an object", param="text.format.schema")
        return k.response_format({"type": "json_schema", "json_schema": {"schema": fmt["schema"]}})
    if fmt["type"] in ("text", "json_object"):
        return k.response_format({"type": fmt["type"]})
    raise InvalidRequest(f"text.format.type must be text, json_object or json_schema (got "
                         f"{str(fmt['type'])[:40]!r})", param="text.format.type")


RESPONSES = Dialect(
    name="responses",
    params=(c.MODEL, c.STREAM, c.TEMPERATURE, c.TOP_P, c.USER,
            Param("input", "messages", LIST),  # prepare() made it chat messages
            Param("max_output_tokens", "max_tokens", INT, ge=1),
            Param("tools", "tools", LIST),
            Param("tool_choice", "tool_choice", parse=_tool_choice),
            Param("text", "constraint", OBJECT, parse=_text)),
    errors=ErrorShape(validation_status=400),
    prepare=prepare,
    prepared=("instructions", "parallel_tool_calls", *_STATEFUL, "background", *sorted(_QUIET),
              *sorted(_LEFT_OUT), "include", "reasoning"),
    required={"messages": "input"},
)
