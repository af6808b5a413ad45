"""Anthropic Messages wire facts, the one table of them: the inbound endpoint (this package) and
the outbound Claude codec (switchyard/providers/anthropic/) translate versions, sampling fields,
stop reasons, tool choices, usage and errors with these, so the two cannot drift. Sources: the
``anthropic`` SDK 2.14 (``types/stop_reason.py``, ``types/usage.py``, ``_exceptions.py``) and
/work/shared/design/providers.md section 1.1."""

from __future__ import annotations

import re
from typing import Any

from switchyard.core.canonical import FinishReason, Usage

VERSION_HEADER = "anthropic-version"
BETA_HEADER = "anthropic-beta"
# What a caller that sends no anthropic-version gets (Claude Code and most gateways send it).
DEFAULT_VERSION = "2023-06-01"
# From this version on, temperature, top_p and top_k are a 400 at any value (section 0 of
# providers.md), and so are document blocks in assistant turns.
NO_SAMPLING_SINCE = "2026-10-21"
SAMPLING = ("temperature", "top_p", "top_k")  # the canonical sampling fields the API has (same names)
DEFAULT_MAX_TOKENS = 4096  # max_tokens is required: what a Claude upstream is sent when a caller gave none
# The optional feature a translating backend may carry or leave out (named in x-switchyard-warning).
THINKING_BUDGET = "thinking.budget_tokens"
VERSION = re.compile(r"\d{4}-\d{2}-\d{2}")

# Canonical finish reason -> stop_reason. A stop sequence that matched is "stop_sequence" (with
# the string); a "stop" whose answer holds tool calls is "tool_use" (some servers say "stop").
STOP_REASON: dict[str | None, str] = {
    "stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
    "content_filter": "refusal", "error": "end_turn", None: "end_turn",
}
# stop_reason -> canonical finish reason (for answers read from a Claude upstream). pause_turn (a
# server tool paused the turn) ends this answer like a stop; the caller continues by sending it back.
FINISH_REASON: dict[str, FinishReason] = {
    "end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
    "pause_turn": "stop", "refusal": "content_filter", "model_context_window_exceeded": "length",
}


def stop_reason(finish: str | None, stop_word: str | None, called: bool) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of an answer."""
    if stop_word is not None:
        return "stop_sequence", stop_word
    reason = STOP_REASON.get(finish, "end_turn")
    return ("tool_use" if called and reason == "end_turn" else reason), None


# tool_choice.type -> OpenAI's tool_choice ("tool" names one function: see request.py), and back
# (a Claude upstream is sent {"type": ...}; a named function is {"type": "tool", "name"}).
TOOL_CHOICE = {"auto": "auto", "any": "required", "none": "none"}
TOOL_CHOICE_OF: dict[str, dict[str, str]] = {openai: {"type": kind} for kind, openai in TOOL_CHOICE.items()}

# Error type by HTTP status (platform.claude.com/docs/en/api/errors).
ERROR_TYPE = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
              403: "permission_error", 404: "not_found_error", 409: "conflict_error",
              413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
              504: "timeout_error", 529: "overloaded_error"}
# Statuses Anthropic's API never answers, as its callers read them: an upstream that failed or
# a model with no deployment able to serve is "overloaded" (529: the SDKs and Claude Code retry
# it and say so); other 4xx are invalid requests.
STATUS = {502: 529, 503: 529}
# Error types of an in-band ``event: error`` (or an error body) from a Claude upstream that mean
# "not now": retried on another deployment when nothing has reached the caller yet.
RETRYABLE_ERRORS = frozenset({"overloaded_error", "rate_limit_error", "api_error", "timeout_error"})


def error_status(status: int) -> tuple[int, str]:
    """(the status, Anthropic's error type) for a gateway error of ``status``."""
    status = STATUS.get(status, status)
    kind = ERROR_TYPE.get(status)
    if kind is None:
        kind = "invalid_request_error" if status < 500 else "api_error"
    return status, kind


def error_body(status: int, message: str, param: str | None = None,
               request_id: str | None = None) -> tuple[int, dict[str, Any]]:
    """Anthropic's error body has no ``param``: the message leads with the field at fault, as
    Anthropic's own do (``max_tokens: Field required``)."""
    status, kind = error_status(status)
    if param and not message.startswith(param):
        message = f"{param}: {message}"
    body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    if request_id:
        body["request_id"] = request_id
    return status, body


def usage_json(u: Usage) -> dict[str, int]:
    """Anthropic's usage: ``input_tokens`` excludes what was read from or written to the cache
    (the canonical ``prompt_tokens`` includes both)."""
    return {"input_tokens": max(u.prompt_tokens - u.cached_tokens - u.cache_write_tokens, 0),
            "output_tokens": u.completion_tokens,
            "cache_read_input_tokens": u.cached_tokens,
            "cache_creation_input_tokens": u.cache_write_tokens}


def usage_of(u: Any, base: Usage | None = None) -> Usage:
    """An Anthropic usage object over ``base`` (the stream's usage so far): fields it has replace."""
    out = Usage() if base is None else Usage(base.prompt_tokens, base.completion_tokens, base.cached_tokens,
                                              base.cache_write_tokens, base.reasoning_tokens)
    if not isinstance(u, dict):
        return out
    read, write = u.get("cache_read_input_tokens"), u.get("cache_creation_input_tokens")
    if read is not None:
        out.cached_tokens = int(read)
    if write is not None:
        out.cache_write_tokens = int(write)
    inp = u.get("input_tokens")
    if inp is not None:
        out.prompt_tokens = int(inp) + out.cached_tokens + out.cache_write_tokens
    elif read is not None or write is not None:  # cache fields alone: keep the input part
        base_in = (base.prompt_tokens - base.cached_tokens - base.cache_write_tokens) if base else 0
        out.prompt_tokens = base_in + out.cached_tokens + out.cache_write_tokens
    if u.get("output_tokens") is not None:
        out.completion_tokens = int(u["output_tokens"])
    return out
