"""OpenAI's refusals for its reasoning models (the o-series, GPT-5 and later but the -chat ones),
worded and shaped as the service answers them (Azure OpenAI serves the same models and the same
body): ``max_tokens`` is an unsupported parameter, and a sampling value other than the default
an unsupported value. The fakes (upstream.py, azure.py) answer them with a 400; test_reasoning_models
checks them with the ``openai`` SDK (``BadRequestError`` with its ``code`` and ``param``)."""

from __future__ import annotations

import re
from typing import Any

_REASONING = re.compile(r"(?:o[1-9]|gpt-5(?!-chat)|gpt-5\.[0-9]+(?!-chat)|codex-mini)(?:-|$)")
_NO_EFFORT_SAMPLES = re.compile(r"gpt-5\.[1-9]")  # effort "none" turns sampling back on
_DEFAULTS = {"temperature": 1, "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0}


def reasoning_refusal(model: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """The ``error`` object OpenAI answers a chat body for ``model`` with (None: it takes it)."""
    name = model.rsplit("/", 1)[-1].lower()
    if not _REASONING.match(name):
        return None
    if "max_tokens" in body:
        return {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                           "'max_completion_tokens' instead.", "type": "invalid_request_error",
                "param": "max_tokens", "code": "unsupported_parameter"}
    if body.get("reasoning_effort") == "none" and _NO_EFFORT_SAMPLES.match(name):
        return None
    for field, default in _DEFAULTS.items():
        v = body.get(field)
        if v is not None and v != default:
            return {"message": f"Unsupported value: '{field}' does not support {v} with this model. "
                               f"Only the default ({default}) value is supported.",
                    "type": "invalid_request_error", "param": field, "code": "unsupported_value"}
    return None
