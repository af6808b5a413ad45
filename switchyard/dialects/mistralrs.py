"""mistral.rs server's ``/v1/completions``."""

from __future__ import annotations

from typing import Any

from switchyard.dialects import common as c
from switchyard.dialects import constraints as k
from switchyard.dialects.spec import BOOL, INT, LIST, NUMBER, Dialect, ErrorShape, Param


def _dry(d: Any) -> dict[str, Any]:
    return {"dry_multiplier": d.multiplier, "dry_base": d.base,
            "dry_allowed_length": d.allowed_length, "dry_sequence_breakers": d.sequence_breakers}


MISTRALRS = Dialect(
    name="mistralrs",
    params=(*c.OPENAI_CORE, c.TOP_K, c.MIN_P, c.TOOLS, c.TOOL_CHOICE, c.stop(None),
            Param("prompt", "prompt", parse=c.prompt_parser()),
            c.REPETITION,
            Param("dry_multiplier", "dry.multiplier", NUMBER, ge=0),
            Param("dry_base", "dry.base", NUMBER, ge=1),
            Param("dry_allowed_length", "dry.allowed_length", INT, ge=0),
            Param("dry_sequence_breakers", "dry.sequence_breakers", LIST),
            Param("grammar", "constraint.grammar", (dict, str), parse=k.grammar_object),
            Param("truncate_sequence", "overflow", BOOL,
                  parse=lambda v: "truncate_prompt" if v else "error")),
    emits={**c.OPENAI_EMITS, **c.plain("top_k", "min_p", "repetition_penalty", "tools", "tool_choice"),
           "dry": _dry, "constraint": k.emit_mistralrs,
           "overflow": lambda v: {"truncate_sequence": v == "truncate_prompt"}},
    errors=ErrorShape(validation_status=400),
)
