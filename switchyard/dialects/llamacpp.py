"""llama.cpp server: its OpenAI-compatible ``/v1/completions`` and its native ``/completion``."""

from __future__ import annotations

from typing import Any

from switchyard.dialects import common as c
from switchyard.dialects import constraints as k
from switchyard.dialects.spec import BOOL, INT, LIST, NUMBER, OBJECT, STR, Dialect, ErrorShape, Param, key


def _mirostat(m: Any) -> dict[str, Any]:
    return {"mirostat": m.mode, "mirostat_tau": m.tau, "mirostat_eta": m.eta}


def _image_data(images: list[Any]) -> dict[str, Any]:
    """llama.cpp's ``image_data: [{data: base64, id}]``; data URLs (Fireworks) lose their header."""
    out = []
    for i, img in enumerate(images):
        if isinstance(img, str):
            out.append({"data": img.split(",", 1)[1] if img.startswith("data:") and "," in img else img,
                        "id": i})
        else:
            out.append(img)
    return {"image_data": out}


def _dry(d: Any) -> dict[str, Any]:
    return {"dry_multiplier": d.multiplier, "dry_base": d.base,
            "dry_allowed_length": d.allowed_length, "dry_sequence_breakers": d.sequence_breakers}


_PARAMS = (
    c.MODEL, c.STREAM, c.STREAM_OPTIONS, c.TEMPERATURE, c.TOP_P, c.TOP_K, c.MIN_P, c.TYPICAL_P,
    c.PRESENCE, c.FREQUENCY, c.N, c.ECHO, c.SUFFIX, c.USER, c.IGNORE_EOS, c.LOGPROBS_INT,
    Param("prompt", "prompt", parse=c.prompt_parser(mixed=True)),
    Param("max_tokens", "max.max_tokens", INT, ge=-1),
    Param("n_predict", "max.n_predict", INT, ge=-1),
    Param("n_probs", "logprobs", INT, ge=0, le=20),
    c.stop(None),
    Param("repeat_penalty", "repetition_penalty", NUMBER, ge=0),
    Param("seed", "seed", INT, ge=-1, parse=lambda v: None if v == -1 else v),
    Param("logit_bias", "logit_bias", (dict, list), parse=c.logit_bias_parser(pairs=True)),
    Param("mirostat", "mirostat.mode", INT, choices=(0, 1, 2)),
    Param("mirostat_tau", "mirostat.tau", NUMBER, ge=0),
    Param("mirostat_eta", "mirostat.eta", NUMBER, ge=0),
    Param("dry_multiplier", "dry.multiplier", NUMBER, ge=0),
    Param("dry_base", "dry.base", NUMBER, ge=1),
    Param("dry_allowed_length", "dry.allowed_length", INT, ge=0),
    Param("dry_sequence_breakers", "dry.sequence_breakers", LIST),
    Param("grammar", "constraint.grammar", STR, parse=k.gbnf("grammar")),
    Param("json_schema", "constraint.json", OBJECT, parse=k.json_schema("json_schema")),
    Param("cache_prompt", "cache_prompt", BOOL),
    Param("image_data", "images", LIST),
)

LLAMACPP = Dialect(
    name="llamacpp",
    params=_PARAMS,
    emits={**c.plain("temperature", "top_p", "top_k", "min_p", "typical_p", "presence_penalty",
                     "frequency_penalty", "n", "echo", "suffix", "user", "ignore_eos", "stop",
                     "seed", "logprobs", "cache_prompt"),
           "max_tokens": key("max_tokens"),
           "repetition_penalty": key("repeat_penalty"),
           "logit_bias": lambda v: {"logit_bias": [[t, b] for t, b in v.items()]},
           "mirostat": _mirostat, "dry": _dry, "constraint": k.emit_llamacpp, "images": _image_data,
           "include_usage": lambda v: {"stream_options": {"include_usage": v}}},
    errors=ErrorShape(validation_status=400, code_is_status=True),
)

# The native /completion body: the same table, read with n_predict as the usual name.
LLAMACPP_NATIVE = Dialect(name="llamacpp", params=_PARAMS, emits=LLAMACPP.emits,
                          errors=LLAMACPP.errors)
