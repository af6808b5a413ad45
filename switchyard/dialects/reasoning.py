"""Reasoning models and reasoning controls, as data.

OpenAI's reasoning models (the o-series, GPT-5 and later) refuse what other chat models take:
``max_tokens`` (the bound is ``max_completion_tokens``) and any sampling value but the default.
The bound's name is the provider row's (``Caps.completion_tokens_bound``); a model's own rules
are the rows of ``OPENAI_REASONING``, matched by the upstream model's name or the route's. A
value such a model refuses is a 400 naming the caller's own field before any call: the service
itself refuses it, so a caller gets what it would get from OpenAI, without a round trip, and no
value the caller chose is silently changed (a dropped temperature would answer a different
question).

OpenAI's reasoning controls (``reasoning_effort``, ``verbosity``) go as sent where the row takes
them (``Caps.reasoning_controls``); where a provider takes a thinking budget instead (Claude's
``thinking``, Gemini's ``thinkingBudget``) the effort becomes one (``EFFORT_BUDGETS``); elsewhere
they are named in x-switchyard-warning (``controls_said``). docs/providers.md has the table.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.errors import InvalidRequest

# openai 3.57's ReasoningEffort and chat ``verbosity`` (types/shared/reasoning_effort.py).
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
VERBOSITIES = ("low", "medium", "high")

# Thinking tokens per effort, where a provider takes a budget rather than an effort. "none" asks
# for no budget (the model's own default). 1024 is Claude's least budget; a budget is lowered to
# what the provider takes (Gemini: 24576) and, for Claude, below the request's max_tokens.
EFFORT_BUDGETS: dict[str, int] = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384,
                                  "xhigh": 24576, "max": 32768}
CLAUDE_MIN_BUDGET = 1024
# Claude models that think (3.7 Sonnet; Opus, Sonnet and Haiku 4 and later), in any id form.
CLAUDE_THINKS = re.compile(r"claude-(?:3-7-|(?:opus|sonnet|haiku)-[4-9])")


def claude_thinks(model: str) -> bool:
    """A Claude model that takes a thinking budget (any provider's spelling of its id)."""
    return CLAUDE_THINKS.search(model.lower()) is not None


@dataclass(frozen=True, slots=True)
class ReasoningModel:
    """A family of OpenAI reasoning models, by name (matched at the start of the name's last
    segment), and what they take."""

    names: re.Pattern[str]
    # canonical field -> the one value the model takes (its default); None: it takes none at all
    fixed: Mapping[str, float | None]
    # reasoning_effort "none" turns reasoning off, and the sampling fields on (GPT-5.1 and later)
    sampling_without_effort: bool = False


# OpenAI's reasoning-model guide: "temperature, top_p, presence_penalty, frequency_penalty,
# logprobs, top_logprobs, logit_bias ... are not supported"; the API takes the defaults as sent.
_FIXED: dict[str, float | None] = {"temperature": 1, "top_p": 1, "presence_penalty": 0,
                                   "frequency_penalty": 0, "logprobs": None, "logit_bias": None}
# First match wins. The gpt-5*-chat models are not reasoning models.
OPENAI_REASONING: tuple[ReasoningModel, ...] = (
    ReasoningModel(re.compile(r"gpt-5\.[1-9][0-9]*(?!-chat)(?:-|$)"), _FIXED, sampling_without_effort=True),
    ReasoningModel(re.compile(r"(?:o[1-9]|gpt-5(?!-chat)|codex-mini)(?:-|$)"), _FIXED),
)


def reasoning_model(*names: str | None) -> ReasoningModel | None:
    """The row of the first of ``names`` that is an OpenAI reasoning model (None: none is)."""
    for name in names:
        if name and (row := _row_of(name)) is not None:
            return row
    return None


# Asked of every chat request, with names that repeat; bounded, as a wildcard route takes any name.
@functools.lru_cache(maxsize=1024)
def _row_of(name: str) -> ReasoningModel | None:
    last = name.rsplit("/", 1)[-1].lower()
    return next((row for row in OPENAI_REASONING if row.names.match(last)), None)


def fit_openai_chat(body: dict[str, Any], req: CanonicalRequest, names: tuple[str | None, ...], *,
                    completion_tokens: bool, controls: bool,
                    caller_param: Callable[[CanonicalRequest, str], str]) -> None:
    """An OpenAI-shaped chat body (``body``, rendered from ``req``) made fit for its upstream:
    the bound as max_completion_tokens where the row says (``completion_tokens``), the reasoning
    controls where the row takes them (``controls``), and a 400 for a value the model (``names``:
    the upstream's, the route's) refuses. ``caller_param`` names a canonical field as the caller did."""
    if completion_tokens and "max_tokens" in body:
        body["max_completion_tokens"] = body.pop("max_tokens")
    if controls:
        if req.reasoning_effort is not None:
            body["reasoning_effort"] = req.reasoning_effort
        if req.verbosity is not None:
            body["verbosity"] = req.verbosity
    row = reasoning_model(*names)
    if row is None or (row.sampling_without_effort and req.reasoning_effort == "none"):
        return
    for field, only in row.fixed.items():
        value = getattr(req, field)
        if value is None or (only is not None and value == only):
            continue
        name = caller_param(req, field)
        takes = f"takes only the default value ({only:g})" if only is not None else "does not take it"
        raise InvalidRequest(f"{name} is not supported by model {req.model}: a reasoning model {takes}; "
                             "leave it out", param=name)


def thinking_budget(req: CanonicalRequest) -> int | None:
    """Thinking tokens the caller asks for: its own budget (Anthropic ``thinking.budget_tokens``,
    which comes with thinking asked for), else its effort's (``EFFORT_BUDGETS``); None: none."""
    if req.reasoning_budget is not None and req.show_reasoning:
        return req.reasoning_budget
    return EFFORT_BUDGETS.get(req.reasoning_effort) if req.reasoning_effort else None


def claude_thinking(req: CanonicalRequest, model: str, max_tokens: int | None) -> dict[str, Any] | None:
    """Claude's ``thinking`` for a request, where ``model`` thinks and the caller asked (None:
    nothing is sent). A caller's own budget is sent as given (its dialect checked it); a budget
    from an effort is lowered below ``max_tokens``, and left out where Claude would refuse
    thinking: under 1024 tokens, with a changed temperature or top_k, a top_p under 0.95, or a
    forced tool choice."""
    if not claude_thinks(model):
        return None
    if req.reasoning_budget is not None and req.show_reasoning:
        return {"type": "enabled", "budget_tokens": req.reasoning_budget}
    budget = thinking_budget(req)
    if budget is None:
        return None
    if max_tokens is not None and max_tokens > 0:
        budget = min(budget, max_tokens - 1)
    forced = req.tool_choice == "required" or isinstance(req.tool_choice, dict)
    if (budget < CLAUDE_MIN_BUDGET or req.temperature not in (None, 1) or req.top_k is not None
            or (req.top_p is not None and req.top_p < 0.95) or forced):
        return None
    return {"type": "enabled", "budget_tokens": budget}


def controls_said(req: CanonicalRequest) -> list[str]:
    """The reasoning controls the caller set, by the caller's own names."""
    responses = req.dialect == "responses"
    out = []
    if req.reasoning_effort is not None:
        out.append("reasoning.effort" if responses else "reasoning_effort")
    if req.verbosity is not None:
        out.append("text.verbosity" if responses else "verbosity")
    return out
