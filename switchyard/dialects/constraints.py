"""Every dialect's way of asking for structured output, read into one ``Constraint`` and written
back out for the upstream dialects that carry one."""

from __future__ import annotations

import json
import re
from typing import Any

from switchyard.core.canonical import Constraint
from switchyard.core.errors import InvalidRequest


def _schema(name: str):
    def parse(v: Any) -> Constraint:
        if isinstance(v, str):  # some clients send the schema as JSON text
            try:
                v = json.loads(v)
            except ValueError:
                raise InvalidRequest(f"{name} is not valid JSON", param=name) from None
        if not isinstance(v, dict):
            raise InvalidRequest(f"{name} must be a JSON schema object", param=name)
        return Constraint("json_schema", v)
    return parse


def _regex(name: str):
    def parse(v: Any) -> Constraint:
        try:
            re.compile(v)
        except re.error as e:
            raise InvalidRequest(f"{name} is not a valid regular expression: {e}", param=name) from None
        return Constraint("regex", v)
    return parse


def _choice(name: str):
    def parse(v: Any) -> Constraint:
        if not v or not all(isinstance(c, str) for c in v):
            raise InvalidRequest(f"{name} must be a non-empty array of strings", param=name)
        return Constraint("choice", list(v))
    return parse


def _grammar_text(name: str, kind: str = "grammar"):
    def parse(v: Any) -> Constraint:
        if not v.strip():
            raise InvalidRequest(f"{name} must not be empty", param=name)
        return Constraint(kind, v)  # type: ignore[arg-type]  # kind: the literal this reader was made for
    return parse


json_schema = _schema
regex = _regex
choice = _choice
gbnf = _grammar_text

_MISTRAL_KINDS = {"regex": "regex", "json_schema": "json_schema", "lark": "lark",
                  "llguidance": "lark", "gbnf": "grammar"}


def grammar_object(v: Any) -> Constraint:
    """mistral.rs: ``{"type": regex|json_schema|lark|llguidance, "value": ...}``; a bare string
    is read as GBNF (llama.cpp's form)."""
    if isinstance(v, str):
        return _grammar_text("grammar")(v)
    if not isinstance(v, dict) or "type" not in v or "value" not in v:
        raise InvalidRequest('grammar must be a GBNF string or {"type", "value"}', param="grammar")
    kind = _MISTRAL_KINDS.get(v["type"])
    if kind is None:
        raise InvalidRequest(f"grammar.type must be one of {sorted(_MISTRAL_KINDS)} "
                             f"(got {v['type']!r})", param="grammar.type")
    if kind == "json_schema":
        return _schema("grammar.value")(v["value"])
    if kind == "regex":
        return _regex("grammar.value")(v["value"])
    if not isinstance(v["value"], str):
        raise InvalidRequest("grammar.value must be a string", param="grammar.value")
    return Constraint(kind, v["value"])  # type: ignore[arg-type]  # kind: the literal this reader was made for


def response_format(v: Any) -> Constraint | None:
    """OpenAI ``{type: json_object|json_schema, json_schema: {schema}}``, Fireworks
    ``{type: json_object, schema}``; ``{type: text}`` means no constraint."""
    if not isinstance(v, dict) or "type" not in v:
        raise InvalidRequest("response_format must be an object with a type", param="response_format")
    t = v["type"]
    if t == "text":
        return None
    if t == "json_object":
        schema = v.get("schema")
        return Constraint("json_schema", schema) if isinstance(schema, dict) else Constraint("json_object")
    if t == "json_schema":
        js = v.get("json_schema")
        schema = js.get("schema") if isinstance(js, dict) else None
        if not isinstance(schema, dict):
            raise InvalidRequest("response_format.json_schema.schema must be an object",
                                 param="response_format.json_schema")
        return Constraint("json_schema", schema)
    if t == "grammar" and isinstance(v.get("grammar"), str):
        return Constraint("grammar", v["grammar"])
    raise InvalidRequest(f"response_format.type must be text, json_object or json_schema (got {t!r})",
                         param="response_format.type")


# --- writing a constraint in an upstream's dialect ------------------------------------------


class Unsupported(Exception):
    """This dialect cannot carry this constraint kind."""


def choice_as_regex(choices: list[str]) -> str:
    return "(" + "|".join(re.escape(c) for c in choices) + ")"


def choice_as_gbnf(choices: list[str]) -> str:
    return "root ::= " + " | ".join(json.dumps(c) for c in choices)


def emit_guided(c: Constraint) -> dict[str, Any]:
    """vLLM and SGP: guided_json / guided_regex / guided_choice / guided_grammar."""
    return {"json_schema": lambda: {"guided_json": c.value},
            "json_object": lambda: {"response_format": {"type": "json_object"}},
            "regex": lambda: {"guided_regex": c.value},
            "choice": lambda: {"guided_choice": c.value},
            "grammar": lambda: {"guided_grammar": c.value},
            }.get(c.kind, _unsupported(c))()


def emit_llamacpp(c: Constraint) -> dict[str, Any]:
    return {"json_schema": lambda: {"json_schema": c.value},
            "json_object": lambda: {"json_schema": {"type": "object"}},
            "grammar": lambda: {"grammar": c.value},
            "choice": lambda: {"grammar": choice_as_gbnf(c.value)},
            }.get(c.kind, _unsupported(c))()


def emit_mistralrs(c: Constraint) -> dict[str, Any]:
    return {"json_schema": lambda: {"grammar": {"type": "json_schema", "value": c.value}},
            "json_object": lambda: {"grammar": {"type": "json_schema", "value": {"type": "object"}}},
            "regex": lambda: {"grammar": {"type": "regex", "value": c.value}},
            "choice": lambda: {"grammar": {"type": "regex", "value": choice_as_regex(c.value)}},
            "lark": lambda: {"grammar": {"type": "lark", "value": c.value}},
            }.get(c.kind, _unsupported(c))()


def emit_response_format(c: Constraint) -> dict[str, Any]:
    """Fireworks and OpenAI chat: JSON only."""
    if c.kind == "json_object":
        return {"response_format": {"type": "json_object"}}
    if c.kind == "json_schema":
        return {"response_format": {"type": "json_object", "schema": c.value}}
    raise Unsupported(c.kind)


def emit_openai_chat(c: Constraint) -> dict[str, Any]:
    if c.kind == "json_object":
        return {"response_format": {"type": "json_object"}}
    if c.kind == "json_schema":
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "output", "schema": c.value}}}
    raise Unsupported(c.kind)


def _unsupported(c: Constraint):
    def fail() -> dict[str, Any]:
        raise Unsupported(c.kind)
    return fail
