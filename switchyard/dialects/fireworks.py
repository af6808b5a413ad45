"""Fireworks AI's ``/inference/v1/completions``."""

from __future__ import annotations

from typing import Any

from switchyard.dialects import common as c
from switchyard.dialects import constraints as k
from switchyard.dialects.spec import BOOL, INT, LIST, NUMBER, OBJECT, STR, Dialect, ErrorShape, Param

_OVERFLOW = {"truncate": "truncate_max_tokens", "error": "error"}


def _mirostat(m: Any) -> dict[str, Any]:
    return {"mirostat_target": m.tau, "mirostat_lr": m.eta}


def _overflow(v: str) -> dict[str, Any]:
    return {"context_length_exceeded_behavior": "error" if v == "error" else "truncate"}


FIREWORKS = Dialect(
    name="fireworks",
    params=(c.MODEL, c.STREAM, c.STREAM_OPTIONS, c.ECHO, c.USER, c.SEED, c.LOGIT_BIAS, c.stop(4),
            Param("prompt", "prompt", parse=c.prompt_parser()),
            Param("temperature", "temperature", NUMBER, ge=0, le=2),
            Param("top_p", "top_p", NUMBER, ge=0, le=1),
            Param("top_k", "top_k", INT, ge=0, le=128),
            Param("presence_penalty", "presence_penalty", NUMBER, ge=-2, le=2),
            Param("frequency_penalty", "frequency_penalty", NUMBER, ge=-2, le=2),
            Param("repetition_penalty", "repetition_penalty", NUMBER, gt=0, le=2),
            Param("n", "n", INT, ge=1, le=128),
            Param("max_tokens", "max.max_tokens", INT, ge=1),
            Param("logprobs", "logprobs", INT, ge=0, le=5),
            Param("ignore_eos", "ignore_eos", BOOL),
            Param("images", "images", LIST),
            Param("mirostat_target", "mirostat.target", NUMBER, ge=0),
            Param("mirostat_lr", "mirostat.lr", NUMBER, ge=0),
            Param("context_length_exceeded_behavior", "overflow", STR, choices=("truncate", "error"),
                  parse=_OVERFLOW.__getitem__),
            Param("response_format", "constraint.rf", OBJECT, parse=k.response_format)),
    # Fireworks documents neither best_of nor suffix.
    emits={**{f: e for f, e in c.OPENAI_EMITS.items() if f not in ("best_of", "suffix")},
           **c.plain("top_k", "repetition_penalty", "ignore_eos", "images"),
           "mirostat": _mirostat, "overflow": _overflow, "constraint": k.emit_response_format},
    errors=ErrorShape(validation_status=400),
    stop_in_output=True,  # "The returned text will contain the stop sequence."
)
