"""``switchyard.core.canonical.replace``: what ``dataclasses.replace`` gives, built by position."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

import pytest

from switchyard.core.canonical import CanonicalRequest, Chunk, Usage, replace


def full_request() -> CanonicalRequest:
    """A request whose every field holds a value of its own (a field out of place would show)."""
    values: dict[str, Any] = {}
    for i, f in enumerate(fields(CanonicalRequest)):
        values[f.name] = f"v{i}"
    values.update(kind="chat", stream=True)
    return CanonicalRequest(**values)


@pytest.mark.parametrize("changes", [
    {"max_tokens": 7},
    {"timeout": 1.5, "overflow": None},
    {"kind": "completion", "prompt": ["x"], "messages": None},
    {"verbosity": "low"},  # the last field
    {},
])
def test_a_request_s_copy_is_dataclasses_replace_s(changes: dict[str, Any]) -> None:
    req = full_request()
    before = dataclasses.astuple(req)
    got = replace(req, **changes)
    assert got == dataclasses.replace(req, **changes)
    assert got is not req and dataclasses.astuple(req) == before  # the original is unchanged
    for f in fields(CanonicalRequest):
        assert getattr(got, f.name) is changes.get(f.name, getattr(req, f.name)), f.name


def test_other_dataclasses_and_unknown_fields() -> None:
    assert replace(Usage(1, 2), cached_tokens=5) == Usage(1, 2, cached_tokens=5)
    assert replace(Chunk(text="a", index=2), text="b") == Chunk(text="b", index=2)
    with pytest.raises(TypeError, match="nope"):
        replace(full_request(), nope=1)  # type: ignore[call-arg]  # (what is tested)


@dataclass
class _Late:
    a: int
    b: int = field(init=False, default=0)
    c: int = field(kw_only=True, default=1)


def test_a_dataclass_it_cannot_build_by_position_is_left_to_dataclasses() -> None:
    x = _Late(1, c=2)
    x.b = 5
    y = replace(x, a=3)
    assert (y.a, y.b, y.c) == (3, 0, 2)  # as dataclasses.replace: b, not in __init__, is its default
