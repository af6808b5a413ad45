"""OpenAI's legacy ``/v1/completions`` as an OpenAI-compatible proxy documents it (and vLLM's
superset of it, as an upstream dialect)."""

from __future__ import annotations

from switchyard.dialects import common as c
from switchyard.dialects import constraints as k
from switchyard.dialects.spec import INT, LIST, OBJECT, STR, Dialect, ErrorShape, Param

OPENAI = Dialect(
    name="openai",
    params=(*c.OPENAI_CORE, c.stop(4),
            Param("prompt", "prompt", parse=c.prompt_parser())),
    emits=dict(c.OPENAI_EMITS),
    # A plain OpenAI body gets OpenAI's own 400 {"error": {..., "param"}} (the SDKs' BadRequestError);
    # a caller naming the dialect gets the proxy's documented FastAPI 422 {"detail": [...]}.
    errors=ErrorShape(validation_status=400),
    named_errors=ErrorShape(validation_status=422, detail=True),
)

# vLLM's OpenAI server: the same names plus its sampling extras and guided decoding.
VLLM = Dialect(
    name="vllm",
    params=(*(p for p in OPENAI.params if p.name != "logprobs"),
            c.MIN_P, c.REPETITION, c.IGNORE_EOS, c.INCLUDE_STOP,
            Param("top_k", "top_k", INT, ge=-1),
            Param("guided_json", "constraint.json", (dict, str), parse=k.json_schema("guided_json")),
            Param("guided_regex", "constraint.regex", STR, parse=k.regex("guided_regex")),
            Param("guided_choice", "constraint.choice", LIST, parse=k.choice("guided_choice")),
            Param("guided_grammar", "constraint.grammar", STR, parse=k.gbnf("guided_grammar")),
            Param("response_format", "constraint.rf", OBJECT, parse=k.response_format),
            Param("logprobs", "logprobs", INT, ge=0, le=20)),
    emits={**c.OPENAI_EMITS,
           **c.plain("top_k", "min_p", "repetition_penalty", "ignore_eos",
                     "include_stop_str_in_output"),
           "constraint": k.emit_guided},
    errors=ErrorShape(validation_status=400),
)
