"""Which dialect a request speaks, and each dialect by name."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.errors import InvalidRequest
from switchyard.dialects.anthropic.render import AnthropicRenderer
from switchyard.dialects.anthropic.request import ANTHROPIC
from switchyard.dialects.chat import CHAT
from switchyard.dialects.embeddings import EMBEDDINGS, EmbeddingsRenderer
from switchyard.dialects.fireworks import FIREWORKS
from switchyard.dialects.llamacpp import LLAMACPP, LLAMACPP_NATIVE
from switchyard.dialects.mistralrs import MISTRALRS
from switchyard.dialects.openai import OPENAI, VLLM
from switchyard.dialects.render import RENDERERS, Renderer
from switchyard.dialects.responses import RESPONSES
from switchyard.dialects.responses_render import ResponsesRenderer
from switchyard.dialects.sgp import SGP
from switchyard.dialects.spec import Dialect

# The dialects of /v1/completions (and of upstreams).
DIALECTS: dict[str, Dialect] = {d.name: d for d in (OPENAI, VLLM, LLAMACPP, MISTRALRS, FIREWORKS, SGP)}
# Every dialect a caller may speak, by the name its canonical requests carry.
CALLERS: dict[str, Dialect] = {**DIALECTS, **{d.name: d for d in (CHAT, ANTHROPIC, RESPONSES, EMBEDDINGS)}}
# Every answer shape, by name.
ANSWERS: dict[str, type[Renderer]] = {**RENDERERS, "anthropic": AnthropicRenderer,
                                      "responses": ResponsesRenderer, "embeddings": EmbeddingsRenderer}

# Canonical fields that are no dialect's body field (the request's envelope as rendered).
_ENVELOPE = frozenset({"model", "prompt", "messages", "stream", "stream_options"})


@cache
def owned_fields() -> frozenset[str]:
    """Every body field any dialect table reads into the canonical request (model, prompt,
    max_tokens under every name, n, best_of, stream, logprobs, echo, sampling, constraints ...):
    what the gateway validates, accounts for and writes itself. Derived from the tables, so a
    field a dialect gains is owned at once; passed-through fields may only be what no table
    knows (vendor extensions)."""
    return frozenset({p.name for d in (*DIALECTS.values(), CHAT, LLAMACPP_NATIVE) for p in d.params}
                     | _ENVELOPE)


DIALECT_HEADER = "x-switchyard-dialect"

# Fields only one product's /v1/completions documents: a request that carries one speaks it.
_MARKS: dict[str, str] = {
    **dict.fromkeys(("n_predict", "repeat_penalty", "mirostat", "mirostat_tau", "mirostat_eta",
                     "cache_prompt", "n_probs", "json_schema", "image_data"), "llamacpp"),
    **dict.fromkeys(("dry_multiplier", "dry_base", "dry_allowed_length", "dry_sequence_breakers",
                     "truncate_sequence"), "mistralrs"),
    **dict.fromkeys(("context_length_exceeded_behavior", "mirostat_target", "mirostat_lr",
                     "images"), "fireworks"),
    **dict.fromkeys(("max_new_tokens", "stop_sequences", "return_token_log_probs",
                     "inference_timeout", "inference_extra_params", "inference_extra_headers"), "sgp"),
    **dict.fromkeys(("guided_json", "guided_regex", "guided_choice", "guided_grammar"), "vllm"),
}
# vLLM's extras that other products share too (llama.cpp and mistral.rs take top_k and min_p,
# Fireworks ignore_eos and response_format, ...): they tell vLLM only when no product-specific
# field is present. vLLM's response_format row reads Fireworks' {"type": "json_object", "schema"}
# too, so a Fireworks body sent to /v1/completions keeps its schema (OpenAI's has no such field).
_WEAK_MARKS: dict[str, str] = dict.fromkeys(
    ("include_stop_str_in_output", "min_p", "top_k", "repetition_penalty", "ignore_eos",
     "response_format"), "vllm")


def sniff_completion_dialect(body: Any, headers: Mapping[str, str]) -> Dialect:
    """The dialect of a ``/v1/completions`` body: named by the header, else told by its fields.

    The first distinctive field wins; ``grammar`` tells llama.cpp (a GBNF string) from
    mistral.rs (an object). Fields several products share (``top_k``, ``min_p`` ...) count only
    when nothing more distinctive is there. A body with no distinctive field is OpenAI's.
    """
    named = headers.get(DIALECT_HEADER)
    if named:
        d = DIALECTS.get(named.lower())
        if d is None:
            raise InvalidRequest(f"{DIALECT_HEADER} must be one of {sorted(DIALECTS)} (got {named!r})",
                                 param=DIALECT_HEADER)
        return d
    if isinstance(body, dict):
        for name in body:
            mark = _MARKS.get(name)
            if mark:
                return DIALECTS[mark]
            if name == "grammar":
                return MISTRALRS if isinstance(body[name], dict) else LLAMACPP
        for name in body:
            mark = _WEAK_MARKS.get(name)
            if mark:
                return DIALECTS[mark]
    return OPENAI


# Canonical fields gathered from several dialect fields: the group their rows write to.
_GROUP_OF = {"max_tokens": "max", "stop": "stop", "mirostat": "mirostat", "dry": "dry",
             "logprobs": "lp", "constraint": "constraint"}
# Which of a dialect's constraint fields a constraint kind most likely came from.
_CONSTRAINT_HINTS = {"regex": ("regex",), "choice": ("choice",), "grammar": ("grammar",),
                     "lark": ("grammar",), "json_schema": ("response_format", "json"),
                     "json_object": ("response_format", "json")}


def caller_param(req: CanonicalRequest, field: str) -> str:
    """The name the caller used for a canonical field (for error messages)."""
    if req.named is not None and field in req.named:
        return req.named[field]
    dialect = CALLERS.get(req.dialect)
    if dialect is None:
        return field
    group = _GROUP_OF.get(field)
    names = [p.name for p in dialect.params
             if p.to == field or (group and p.to.startswith(group + "."))]
    if field == "constraint" and req.constraint is not None:
        for hint in _CONSTRAINT_HINTS.get(req.constraint.kind, ()):
            for name in names:
                if hint in name:
                    return name
    return names[0] if names else field


__all__ = ["ANSWERS", "CALLERS", "CHAT", "DIALECTS", "caller_param", "sniff_completion_dialect"]
