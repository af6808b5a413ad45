"""A request shaped as Claude Code 2.1.332 sends its first turn (the appendix of
``/work/shared/design/providers.md``, from a capture): ``POST /v1/messages?beta=true``, 87 KB,
three system blocks (the billing attribution first, without cache_control; two with it), 12 tool
definitions (32 KB), ``metadata.user_id`` as a JSON string, ``max_tokens: 32000``, adaptive
thinking, ``context_management``, ``output_config.effort`` and ``stream``. The texts are filler
of the captured sizes; the structure, field names and headers are the captured ones."""

from __future__ import annotations

import json
from typing import Any

TOOLS = ("Agent", "Bash", "Edit", "ListAgents", "Read", "ReportFindings", "ScheduleWakeup", "Skill",
         "ToolSearch", "Workflow", "DeferredToolPlaceholder", "Write")
BETAS = ("claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
         "thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20")
BILLING = "x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=sdk-cli;"
_LINE = ("When the user asks for a change, read the relevant files first, keep edits minimal, run the "
         "project's tests, and report what changed and why in a few sentences.\n")


def _filler(size: int) -> str:
    return (_LINE * (size // len(_LINE) + 1))[:size]


def _tool(name: str) -> dict[str, Any]:
    return {"name": name, "description": _filler(1900),
            "input_schema": {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                             "additionalProperties": False, "required": ["command"],
                             "properties": {"command": {"type": "string", "description": _filler(200)},
                                            "timeout": {"type": "number", "description": "milliseconds"},
                                            "description": {"type": "string", "description": _filler(120)},
                                            "run_in_background": {"type": "boolean"}}}}


def headers(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", "anthropic-version": "2023-06-01", "anthropic-beta": BETAS,
            "x-app": "cli", "user-agent": "claude-cli/2.1.332 (external, sdk-cli)",
            "x-claude-code-session-id": "6f1c1a52-0d0e-4a8e-9d9f-2b8f0c5a9e11",
            "anthropic-dangerous-direct-browser-access": "true", "content-type": "application/json"}


def body(model: str, prompt: str = "say hi", *, stream: bool = True) -> dict[str, Any]:
    eph = {"type": "ephemeral"}
    return {
        "model": model,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\n" + _filler(3000) + "</system-reminder>"},
            {"type": "text", "text": prompt, "cache_control": eph}]}],
        "system": [
            {"type": "text", "text": BILLING},
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
             "cache_control": eph},
            {"type": "text", "text": _filler(51_000), "cache_control": eph}],
        "tools": [_tool(n) for n in TOOLS],
        "metadata": {"user_id": json.dumps({"device_id": "d" * 64, "session_id": "6f1c1a52"})},
        "max_tokens": 32000,
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "stream": stream,
    }
