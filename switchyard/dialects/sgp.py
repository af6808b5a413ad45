"""Scale GenAI Platform's completions: ``/v4/beta/completions`` as its reference documents it, and
the OpenAI-shaped body both SGP SDKs send there and to ``/v5/completions`` (``scale-gp`` and
``scale-gp-beta``: ``logprobs`` as an int, ``prompt`` as a string or a list, ``echo``, ``best_of``).
One table reads both: the SDKs' names are OpenAI's, the reference's are its own."""

from __future__ import annotations

from typing import Any

from switchyard.core.errors import InvalidRequest
from switchyard.core.headers import TOKEN, denied_header, header_problem
from switchyard.dialects import common as c
from switchyard.dialects import constraints as k
from switchyard.dialects.spec import (
    BOOL,
    BOOL_OR_INT,
    INT,
    LIST,
    NUMBER,
    OBJECT,
    STR,
    Dialect,
    ErrorShape,
    Param,
)

HEADERS_FIELD = "inference_extra_headers"
PARAMS_FIELD = "inference_extra_params"
MAX_EXTRA_HEADERS = 32


def extra_headers(value: Any) -> dict[str, str]:
    """``inference_extra_headers``, checked (a ``Param.parse``)."""
    if len(value) > MAX_EXTRA_HEADERS:
        raise InvalidRequest(f"{HEADERS_FIELD} allows at most {MAX_EXTRA_HEADERS} headers "
                             f"(got {len(value)})", param=HEADERS_FIELD)
    out: dict[str, str] = {}
    for name, v in value.items():
        shown = name.encode("unicode_escape").decode()[:64]  # control characters escaped too
        where = f"{HEADERS_FIELD}.{shown}"
        if not TOKEN.fullmatch(name):
            raise InvalidRequest(f"{where}: {header_problem(name, '')}", param=where)
        low = name.lower()
        if denied_header(low):
            raise InvalidRequest(f"{where}: the {low} header is never taken from a caller", param=where)
        if not isinstance(v, str):
            raise InvalidRequest(f"{where} must be a string", param=where)
        why = header_problem(name, v)
        if why is not None:
            raise InvalidRequest(f"{where}: {why}", param=where)
        if low in out:
            raise InvalidRequest(f"{where}: given twice", param=where)
        out[low] = v
    return out


def _logprobs(top: int) -> dict[str, Any]:
    out: dict[str, Any] = {"logprobs": True, "return_token_log_probs": True}
    if top:
        out["top_logprobs"] = top
    return out


MIN_TIMEOUT = 0.001  # seconds; a deadline shorter than that is no deadline a request could meet


def _timeout(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not v >= MIN_TIMEOUT:
        raise InvalidRequest("inference_timeout must be a positive number of seconds, at least "
                             f"{MIN_TIMEOUT:g}", param="inference_timeout")
    return float(v)


SGP = Dialect(
    name="sgp",
    params=(c.MODEL, c.STREAM, c.STREAM_OPTIONS, c.TEMPERATURE, c.TOP_P, c.TOP_K, c.PRESENCE,
            c.FREQUENCY, c.N, c.BEST_OF, c.SEED, c.SUFFIX, c.USER, c.LOGIT_BIAS, c.INCLUDE_STOP,
            c.TOOLS, c.TOOL_CHOICE, c.ECHO,
            Param("prompt", "prompt", parse=c.prompt_parser()),
            Param("max_new_tokens", "max.max_new_tokens", INT, ge=1),
            Param("max_tokens", "max.max_tokens", INT, ge=0),
            Param("max_completion_tokens", "max.max_completion_tokens", INT, ge=1),
            c.stop(4), c.stop(4, "stop_sequences"),
            Param("return_token_log_probs", "lp.tokens", BOOL),
            # The reference's boolean, or (the SDKs) OpenAI's legacy count of alternatives, at most 5.
            Param("logprobs", "lp.enabled", BOOL_OR_INT, ge=0, le=5),
            Param("top_logprobs", "lp.top", INT, ge=0, le=20),
            Param("guided_json", "constraint.json", (dict, str), parse=k.json_schema("guided_json")),
            Param("guided_regex", "constraint.regex", STR, parse=k.regex("guided_regex")),
            Param("guided_choice", "constraint.choice", LIST, parse=k.choice("guided_choice")),
            Param("guided_grammar", "constraint.grammar", STR, parse=k.gbnf("guided_grammar")),
            Param("response_format", "constraint.rf", OBJECT, parse=k.response_format),
            Param("inference_timeout", "timeout", parse=_timeout),
            Param("inference_extra_params", "extra_params", OBJECT),  # owned fields: parse._cross_checks
            Param("inference_extra_headers", "extra_headers", OBJECT, parse=extra_headers),
            Param("repetition_penalty", "repetition_penalty", NUMBER, gt=0, le=2),),
    # SGP documents no echo: the gateway emulates it (the "echo" emitter is left out).
    emits={**{f: e for f, e in c.OPENAI_EMITS.items() if f != "echo"},
           **c.plain("top_k", "include_stop_str_in_output", "tools", "tool_choice",
                     "repetition_penalty"),
           "max_tokens": lambda v: {} if v < 0 else {"max_new_tokens": v},
           "stop": lambda v: {"stop_sequences": v},
           "logprobs": _logprobs,
           "constraint": k.emit_guided,
           "timeout": lambda v: {"inference_timeout": v},
           "extra_params": lambda v: {"inference_extra_params": v},
           "extra_headers": lambda v: {"inference_extra_headers": v}},
    errors=ErrorShape(validation_status=422, detail=True),
)
