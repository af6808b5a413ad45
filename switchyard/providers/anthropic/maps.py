"""Anthropic Messages <-> OpenAI/canonical mapping tables, as plain data (shared with the inbound
/v1/messages dialect when it lands)."""

from __future__ import annotations

from switchyard.core.canonical import FinishReason

# stop_reason -> canonical finish_reason. pause_turn (a server tool paused the turn) ends this
# answer like a stop; the caller continues the turn by sending it back.
FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

# OpenAI tool_choice strings -> Anthropic tool_choice objects ({"type": "tool", "name"} for a
# named function is built in code).
TOOL_CHOICE: dict[str, dict[str, str]] = {
    "auto": {"type": "auto"},
    "required": {"type": "any"},
    "none": {"type": "none"},
}

# Error types of an in-band ``event: error`` (or an error body) that mean "not now": retried on
# another deployment when nothing has reached the caller yet.
RETRYABLE_ERRORS = frozenset({"overloaded_error", "rate_limit_error", "api_error", "timeout_error"})

# Canonical sampling fields the Messages API has (same names); everything else it lacks.
SAMPLING = ("temperature", "top_p", "top_k")

API_VERSION = "2023-06-01"  # the version whose sampling fields (temperature, top_p, top_k) exist
SAMPLING_REMOVED = "2026-10-21"  # from this version on they are a 400 at any value
DEFAULT_MAX_TOKENS = 4096  # max_tokens is required; sent when the caller gave none
