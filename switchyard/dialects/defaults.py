"""Each dialect's documented defaults, in canonical field names.

Only the built-in engine applies these (an upstream applies its own); a field a dialect leaves
undocumented falls back to ``ENGINE_DEFAULTS``.
"""

from __future__ import annotations

from typing import Any

ENGINE_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,  # 0 = off
    "min_p": 0.0,
    "typical_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "n": 1,
    "max_tokens": 16,  # completions; chat defaults to the rest of the context window
    "include_stop_str_in_output": False,
    "echo": False,
    "ignore_eos": False,
    "cache_prompt": True,
    "overflow": "error",
}

DIALECT_DEFAULTS: dict[str, dict[str, Any]] = {
    "openai": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 16},
    "vllm": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 16},
    "llamacpp": {
        "temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
        "repetition_penalty": 1.1, "max_tokens": -1, "cache_prompt": True,
    },
    "mistralrs": {"max_tokens": 16},
    "fireworks": {
        "temperature": 1.0, "top_p": 1.0, "max_tokens": 16,
        "overflow": "truncate_max_tokens", "include_stop_str_in_output": True,
    },
    "sgp": {},
    "chat": {"max_tokens": None},
    # Claude Code asks for max_tokens 32000 whatever the model: a smaller window gets what fits
    # (max_tokens lowered to the room left) rather than a 400 that stops the client.
    "anthropic": {"max_tokens": None, "overflow": "truncate_max_tokens"},
    "responses": {"max_tokens": None},
}


def sampling_defaults(dialect: str) -> dict[str, Any]:
    """Defaults for a request in ``dialect``: the dialect's own over the engine's."""
    return {**ENGINE_DEFAULTS, **DIALECT_DEFAULTS.get(dialect, {})}
