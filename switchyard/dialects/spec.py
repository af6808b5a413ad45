"""The machinery behind every dialect table: declarative parameters in, canonical fields out.

A dialect is a tuple of ``Param`` rows (name, canonical target, type, range, transform), plus a
table of ``emit`` functions for the other direction (canonical field -> the dialect's body keys).
Composite canonical values (mirostat, DRY, logprobs, the constraint) are gathered under dotted
targets such as ``"mirostat.tau"`` and assembled once all rows are read (the assemblers in ``parse.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from switchyard.core.errors import InvalidRequest

NUMBER = (int, float)
INT = (int,)
BOOL = (bool,)
STR = (str,)
LIST = (list,)
OBJECT = (dict,)
BOOL_OR_INT = (bool, int)
STR_OR_LIST = (str, list)
ANY: tuple[type, ...] = ()

_TYPE_NAMES: dict[tuple[type, ...], str] = {
    NUMBER: "a number", INT: "an integer", BOOL: "a boolean", STR: "a string", LIST: "an array",
    OBJECT: "an object", BOOL_OR_INT: "a boolean or an integer", STR_OR_LIST: "a string or an array"}


@dataclass(frozen=True, slots=True)
class Param:
    """One field of a dialect's request body."""

    name: str
    to: str  # canonical field, or "group.part" for composite values
    type: tuple[type, ...] = ANY
    ge: float | None = None
    le: float | None = None
    gt: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None
    max_items: int | None = None
    parse: Callable[[Any], Any] | None = None  # runs after the checks; may raise InvalidRequest

    def read(self, value: Any) -> Any:
        if self.type and (not isinstance(value, self.type) or
                          (isinstance(value, bool) and bool not in self.type)):
            raise InvalidRequest(f"{self.name} must be {_TYPE_NAMES.get(self.type, 'valid')}"
                                 f" (got {_json_type(value)})", param=self.name)
        if self.choices is not None and value not in self.choices:
            raise InvalidRequest(f"{self.name} must be one of {list(self.choices)} (got {value!r})",
                                 param=self.name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            self._check_range(value)
        if self.max_items is not None and isinstance(value, list) and len(value) > self.max_items:
            raise InvalidRequest(f"{self.name} allows at most {self.max_items} items "
                                 f"(got {len(value)})", param=self.name)
        return self.parse(value) if self.parse else value

    def _check_range(self, v: float) -> None:
        lo = self.ge if self.ge is not None else self.gt
        hi = self.le if self.le is not None else self.lt
        bad = ((self.ge is not None and v < self.ge) or (self.gt is not None and v <= self.gt)
               or (self.le is not None and v > self.le) or (self.lt is not None and v >= self.lt))
        if not bad:
            return
        if lo is not None and hi is not None:
            rng = f"between {_n(lo)} and {_n(hi)}"
            excluded = [_n(b) for b in (self.gt, self.lt) if b is not None]
            if excluded:
                rng += f" ({' and '.join(excluded)} excluded)"
        elif lo is not None:
            rng = f"greater than {_n(lo)}" if self.gt is not None else f"at least {_n(lo)}"
        else:
            rng = f"less than {_n(hi)}" if self.lt is not None else f"at most {_n(hi)}"
        raise InvalidRequest(f"{self.name} must be {rng} (got {_n(v)})", param=self.name)


def _n(v: float | None) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _json_type(v: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object", type(None): "null"}.get(type(v), type(v).__name__)


Emit = Callable[[Any], dict[str, Any]]


def key(name: str, transform: Callable[[Any], Any] | None = None) -> Emit:
    """An emitter that writes the canonical value under ``name`` (optionally transformed)."""
    if transform is None:
        return lambda v: {name: v}
    return lambda v: {name: transform(v)}


@dataclass(frozen=True, slots=True)
class ErrorShape:
    """How a dialect's errors look on the wire."""

    validation_status: int = 400  # 422 where the dialect documents FastAPI-style validation
    detail: bool = False  # validation errors as {"detail": [{"loc", "msg", "type"}]}
    code_is_status: bool = False  # llama.cpp puts the HTTP status in error.code


@dataclass(frozen=True, slots=True)
class Dialect:
    """A request dialect: how to read it, how to write it, how its errors look."""

    name: str
    params: tuple[Param, ...]
    emits: dict[str, Emit] = field(default_factory=dict)
    errors: ErrorShape = field(default_factory=ErrorShape)
    # The error shape for callers who name the dialect (x-switchyard-dialect); default: ``errors``.
    named_errors: ErrorShape | None = None
    # The server's own stop semantics: True when the returned text keeps the stop sequence.
    stop_in_output: bool = False
    # What rows cannot express (cross-field rewrites): body -> (the body the rows read, canonical
    # fields it sets itself, such as ``as_sent`` and ``left_out``; strict keys do not refuse what it
    # read).
    prepare: Callable[[dict[str, Any]], tuple[dict[str, Any], dict[str, Any]]] | None = None
    # The fields ``prepare`` reads (beside the rows): for the OpenAPI document and error checks.
    prepared: tuple[str, ...] = ()
    # The dialect's name for a required canonical field, where it differs ("messages": "input").
    required: dict[str, str] = field(default_factory=dict)
    # The caller's answer names the stop sequence that matched (Anthropic's stop_sequence): the
    # gateway applies stop sequences itself rather than sending them to an upstream that
    # cannot say which one matched.
    names_stop: bool = False
    # Derived from params: each row by the dialect's field name, for parsing.
    by_name: dict[str, Param] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {p.name: p for p in self.params})
