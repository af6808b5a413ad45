"""Parameter rows and emitters that several dialects share (OpenAI's legacy names, mostly)."""

from __future__ import annotations

from typing import Any

from switchyard.core.canonical import UNLIMITED
from switchyard.core.errors import InvalidRequest
from switchyard.dialects.spec import BOOL, INT, LIST, NUMBER, OBJECT, STR, Emit, Param, key

# --- parse helpers -------------------------------------------------------------------------


def prompt_parser(name: str = "prompt", *, mixed: bool = False, lists: bool = True):
    """Normalize every documented prompt form to a list of prompts.

    Accepts a string, a list of strings, a list of token ids, a list of token-id lists, and (when
    ``mixed``) llama.cpp's list mixing ids and strings, which is one prompt.
    """

    def parse(v: Any) -> list[Any]:
        if isinstance(v, str):
            return [v]
        if not lists or not isinstance(v, list):
            raise InvalidRequest(f"{name} must be a string" + ("" if not lists else
                                 " or an array"), param=name)
        if not v:
            raise InvalidRequest(f"{name} must not be empty", param=name)
        if all(isinstance(x, str) for x in v):
            return list(v)
        if all(_is_id(x) for x in v):
            return [list(v)]
        if all(isinstance(x, list) and x and all(_is_id(t) for t in x) for x in v):
            return [list(x) for x in v]
        if mixed and all(_is_id(x) or isinstance(x, str) for x in v):
            return [list(v)]
        raise InvalidRequest(f"{name} must be a string, an array of strings, an array of token ids"
                             " or an array of token-id arrays", param=name)

    return parse


def _is_id(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def stop_parser(name: str, max_items: int | None):
    def parse(v: Any) -> list[str]:
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items):
            raise InvalidRequest(f"{name} must be a non-empty string or an array of them", param=name)
        if max_items is not None and len(items) > max_items:
            raise InvalidRequest(f"{name} allows at most {max_items} sequences (got {len(items)})",
                                 param=name)
        return list(items)

    return parse


def logit_bias_parser(name: str = "logit_bias", *, pairs: bool = False):
    """``{"token_id": bias}`` (bias -100..100); with ``pairs`` also llama.cpp's
    ``[[id, bias], [id, false]]`` where false bans the token."""

    def parse(v: Any) -> dict[int, float]:
        items: list[tuple[Any, Any]]
        if isinstance(v, dict):
            items = list(v.items())
        elif pairs and isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 for p in v):
            items = [(p[0], -100.0 if p[1] is False else p[1]) for p in v]
        else:
            raise InvalidRequest(f"{name} must map token ids to biases", param=name)
        out: dict[int, float] = {}
        for tok, bias in items:
            try:
                tid = int(tok)
            except (TypeError, ValueError):
                raise InvalidRequest(f"{name} keys must be token ids (got {tok!r})", param=name) from None
            if isinstance(bias, bool) or not isinstance(bias, int | float) or not -100 <= bias <= 100:
                raise InvalidRequest(f"{name} values must be between -100 and 100 (got {bias!r})",
                                     param=name)
            out[tid] = float(bias)
        return out

    return parse


def include_usage(v: Any) -> bool | None:
    if not isinstance(v, dict):
        raise InvalidRequest("stream_options must be an object", param="stream_options")
    iu = v.get("include_usage")
    if iu is not None and not isinstance(iu, bool):
        raise InvalidRequest("stream_options.include_usage must be a boolean",
                             param="stream_options.include_usage")
    return iu


# --- rows ------------------------------------------------------------------------------------

MODEL = Param("model", "model", STR)
STREAM = Param("stream", "stream", BOOL)
STREAM_OPTIONS = Param("stream_options", "include_usage", OBJECT, parse=include_usage)
TEMPERATURE = Param("temperature", "temperature", NUMBER, ge=0, le=2)
TOP_P = Param("top_p", "top_p", NUMBER, ge=0, le=1)
TOP_K = Param("top_k", "top_k", INT, ge=0)
MIN_P = Param("min_p", "min_p", NUMBER, ge=0, le=1)
TYPICAL_P = Param("typical_p", "typical_p", NUMBER, gt=0, le=1)
PRESENCE = Param("presence_penalty", "presence_penalty", NUMBER, ge=-2, le=2)
FREQUENCY = Param("frequency_penalty", "frequency_penalty", NUMBER, ge=-2, le=2)
REPETITION = Param("repetition_penalty", "repetition_penalty", NUMBER, gt=0, le=2)
N = Param("n", "n", INT, ge=1, le=128)
BEST_OF = Param("best_of", "best_of", INT, ge=1, le=128)
SEED = Param("seed", "seed", INT)
ECHO = Param("echo", "echo", BOOL)
SUFFIX = Param("suffix", "suffix", STR)
USER = Param("user", "user", STR)
IGNORE_EOS = Param("ignore_eos", "ignore_eos", BOOL)
MAX_TOKENS = Param("max_tokens", "max.max_tokens", INT, ge=0)
# OpenAI's newer name (clients send it to /v1/completions too): the same bound, sent as max_tokens.
MAX_COMPLETION_TOKENS = Param("max_completion_tokens", "max.max_completion_tokens", INT, ge=0)
LOGPROBS_INT = Param("logprobs", "logprobs", INT, ge=0, le=5)
LOGIT_BIAS = Param("logit_bias", "logit_bias", OBJECT, parse=logit_bias_parser())
TOOLS = Param("tools", "tools", LIST)
TOOL_CHOICE = Param("tool_choice", "tool_choice")
INCLUDE_STOP = Param("include_stop_str_in_output", "include_stop_str_in_output", BOOL)


def stop(max_items: int | None, name: str = "stop") -> Param:
    return Param(name, f"stop.{name}", max_items=max_items, parse=stop_parser(name, max_items))


OPENAI_CORE = (MODEL, STREAM, STREAM_OPTIONS, TEMPERATURE, TOP_P, PRESENCE, FREQUENCY, N, BEST_OF,
               SEED, ECHO, SUFFIX, USER, MAX_TOKENS, MAX_COMPLETION_TOKENS, LOGPROBS_INT, LOGIT_BIAS)

# --- emitters (canonical -> a dialect's body keys) ---------------------------------------------


def _max_tokens(v: int) -> dict[str, Any]:
    # -1 (unlimited) only means something to llama.cpp; elsewhere let the upstream decide.
    return {} if v == UNLIMITED else {"max_tokens": v}


def _logit_bias(v: dict[int, float]) -> dict[str, Any]:
    return {"logit_bias": {str(k): b for k, b in v.items()}}


def plain(*fields: str) -> dict[str, Emit]:
    return {f: key(f) for f in fields}


OPENAI_EMITS: dict[str, Emit] = {
    **plain("temperature", "top_p", "presence_penalty", "frequency_penalty", "n", "best_of",
            "seed", "stop", "echo", "suffix", "user", "logprobs"),
    "max_tokens": _max_tokens,
    "logit_bias": _logit_bias,
    "include_usage": lambda v: {"stream_options": {"include_usage": v}},
}
