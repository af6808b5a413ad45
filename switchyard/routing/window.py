"""A request that does not fit its model's context window, fitted as the caller's overflow policy
asks, where the window is configured: the gateway then honours the policy itself, for any upstream
(Fireworks' ``context_length_exceeded_behavior: truncate`` lowers max_tokens, mistral.rs's
``truncate_sequence: true`` cuts the prompt's start, ``error`` refuses). Tokens are counted as
the gateway counts them for admission (``switchyard.policies.tokens``)."""

from __future__ import annotations

import re
from dataclasses import replace

from switchyard.core.canonical import CanonicalRequest, OverflowPolicy, Prompt
from switchyard.core.deployments import ModelConfig
from switchyard.core.errors import InvalidRequest
from switchyard.dialects.defaults import sampling_defaults


def truncates(req: CanonicalRequest) -> bool:
    """The caller's overflow policy (said, else its product's) lowers max_tokens to what fits."""
    return (req.overflow or sampling_defaults(req.dialect).get("overflow")) == "truncate_max_tokens"


def cap_output(req: CanonicalRequest, model: ModelConfig) -> CanonicalRequest:
    """``req`` with max_tokens lowered to the model's ``max_output_tokens`` where the caller's
    policy truncates (Claude Code asks 32000 of every model); otherwise the upstream decides."""
    cap = model.max_output_tokens
    if cap is not None and req.max_tokens is not None and req.max_tokens > cap and truncates(req):
        return replace(req, max_tokens=cap)
    return req


def fit_window(req: CanonicalRequest, group: str, model: ModelConfig, window: int,
               prompt_tokens: int) -> CanonicalRequest:
    """``req`` made to fit ``window`` of model ``group`` (``prompt_tokens``: its prompt as counted
    for admission), its overflow policy honoured and so cleared; an InvalidRequest when it cannot."""
    asked = req.max_tokens if req.max_tokens is not None and req.max_tokens > 0 else 0
    if prompt_tokens + asked <= window:
        return replace(req, overflow=None) if req.overflow is not None else req
    # Unsaid, the caller's product decides (Fireworks truncates by default), as on the engine.
    policy = req.overflow or sampling_defaults(req.dialect).get("overflow")
    if policy == "truncate_max_tokens" and prompt_tokens < window:
        return replace(req, max_tokens=window - prompt_tokens, overflow=None)
    if policy == "truncate_prompt" and asked < window and req.prompt is not None:
        return replace(req, prompt=[_keep_last(p, window - asked, req, model) for p in req.prompt],
                       overflow=None)
    raise InvalidRequest(
        f"model {group} has a context window of {window} tokens; the request needs "
        f"{prompt_tokens + asked} ({prompt_tokens} in the prompt, {asked} for the completion)",
        param="max_tokens" if asked and prompt_tokens < window else "prompt")


def _keep_last(prompt: Prompt, keep: int, req: CanonicalRequest, model: ModelConfig) -> Prompt:
    from switchyard.policies.tokens import encoding_for, keep_last

    if isinstance(prompt, str):
        return keep_last(prompt, keep, encoding_for(req, model))
    if all(isinstance(t, int) for t in prompt):
        return prompt[-keep:]
    raise InvalidRequest(f"model {model.name}: a prompt mixing token ids and text cannot be truncated "
                         "by the gateway", param="prompt")


# An upstream's own overflow error (OpenAI's and vLLM's wordings): its window and the prompt as it
# counted it, so an unconfigured window is learned from the refusal and the request fitted once.
_MAX = re.compile(r"maximum context length is (\d+)")
_PROMPT = re.compile(r"\((\d+) in the (?:messages|prompt)|has (\d+) input tokens|(\d+) prompt tokens")
_REQUESTED = re.compile(r"requested (\d+) tokens")


def stated_overflow(message: str, max_tokens: int | None) -> tuple[int, int] | None:
    """(window, prompt tokens) an upstream's context-overflow error states; None when it is
    another error or does not say both."""
    m = _MAX.search(message)
    if m is None:
        return None
    window = int(m.group(1))
    p = _PROMPT.search(message)
    if p is not None:
        return window, int(next(g for g in p.groups() if g is not None))
    r = _REQUESTED.search(message)
    if r is not None and max_tokens is not None and max_tokens > 0:
        return window, max(int(r.group(1)) - max_tokens, 0)
    return None


def truncating(req: CanonicalRequest) -> OverflowPolicy | None:
    """The caller's overflow policy (said, else its product's) when it fits the request rather
    than refusing it."""
    policy = req.overflow or sampling_defaults(req.dialect).get("overflow")
    if policy == "truncate_max_tokens" or policy == "truncate_prompt":
        return policy
    return None
