"""The one place that fits a request to a context window (``Fitter``). A request that does not fit
its model's context window is fitted as the caller's overflow policy asks, where the window is
configured: the gateway then honours the policy itself, for any upstream (Fireworks'
``context_length_exceeded_behavior: truncate`` lowers max_tokens, mistral.rs's
``truncate_sequence: true`` cuts the prompt's start, ``error`` refuses), or it goes to the
group's ``context_fallback``. Where no window is configured, a truncating policy is honoured with
the window the upstream reports, or the one its own overflow error states (the request is sent
once more, fitted). Tokens are counted as the gateway counts them for admission
(``switchyard.policies.tokens``)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

from switchyard.core.canonical import CanonicalRequest, OverflowPolicy, Prompt, replace
from switchyard.core.deployments import ModelConfig
from switchyard.core.errors import GatewayError, InvalidRequest
from switchyard.dialects.defaults import sampling_defaults
from switchyard.routing.resolve import Route, RunInfo


class Fitter:
    """``fit`` before the attempts (the configured windows and ``context_fallback``),
    ``fit_reported`` where no window is configured (the window the upstream reports), ``refit``
    on the upstream's own overflow error; ``need`` the tokens a request needs (its prompt counted
    once per request, in ``info``)."""

    def __init__(self, resolve: Callable[[str], Route]) -> None:
        self._resolve = resolve

    def need(self, req: CanonicalRequest, route: Route, info: RunInfo) -> int:
        if info.prompt_tokens is None:
            from switchyard.policies.tokens import count_prompt_tokens

            info.prompt_tokens = count_prompt_tokens(req, route.model)
        return info.prompt_tokens + max(req.max_tokens or 0, 0)

    def fit(self, req: CanonicalRequest, route: Route, info: RunInfo) -> tuple[Route, CanonicalRequest]:
        """The prompt does not fit the group's window: go straight to its ``context_fallback``;
        with none left, fit it as the caller's overflow policy asks (or refuse). Where the window
        is known the gateway honours the policy itself (``fit_window``)."""
        if req.kind == "embedding":
            return route, req  # a window bounds each input, not their sum: the backend truncates
        seen = {route.group}
        req = cap_output(req, route.model)
        while route.model.context_window is not None:
            window = route.model.context_window
            nxt = route.model.context_fallback
            if self.need(req, route, info) <= window or nxt is None or nxt in seen:
                if all(t.deployment.backend != "upstream" for t in route.targets):
                    return route, req  # the engine fits exactly itself, with the model's tokenizer
                return route, fit_window(req, route.group, route.model, window, info.prompt_tokens or 0)
            route = self._resolve(nxt)
            seen.add(route.group)
            req = cap_output(req, route.model)
        return route, req

    async def fit_reported(self, req: CanonicalRequest, route: Route,
                           info: RunInfo) -> tuple[CanonicalRequest, OverflowPolicy | None]:
        """Where no window is configured and the caller's policy truncates: ``req`` fitted to the
        window the upstream reports, and the policy to ``refit`` by on its overflow error (None:
        nothing to honour here)."""
        policy = truncating(req) if route.model.context_window is None else None
        if policy is None or any(t.deployment.backend == "engine" for t in route.targets) or all(
                t.caps.applies_overflow for t in route.targets):
            # The engine knows its own window and fits exactly, with the model's tokenizer; an
            # upstream with the field (Fireworks, mistral.rs) applies the policy itself.
            return req, None
        window = await self._reported_window(route)
        if window is not None:  # fitted to what the upstream reports (vLLM's max_model_len)
            self.need(req, route, info)
            req = fit_window(req, route.group, route.model, window, info.prompt_tokens or 0)
        elif req.overflow is not None:  # the gateway honours it: no upstream is asked to
            req = replace(req, overflow=None)
        return req, policy

    @staticmethod
    def refit(req: CanonicalRequest, route: Route, policy: OverflowPolicy | None,
              e: GatewayError) -> CanonicalRequest | None:
        """``req`` fitted to the window an upstream's overflow refusal states (once), or None."""
        if policy is None or e.status != 400:
            return None
        stated = stated_overflow(e.message, req.max_tokens)
        if stated is None:
            return None
        window, prompt = stated
        return fit_window(replace(req, overflow=policy), route.group, route.model, window, prompt)

    @staticmethod
    async def _reported_window(route: Route) -> int | None:
        """The smallest window the route's deployments report (each asked once, bounded)."""
        asks = [t.backend.reported_window(route.upstream_model) for t in route.targets
                if t.caps.reports_window]
        known = [w for w in await asyncio.gather(*asks) if w is not None]
        return min(known) if known else None


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
