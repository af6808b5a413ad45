"""What every client's cell asserts, whatever the SDK's object names."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from tests.clients.conftest import MAX_TOKENS, PROMPT, Gateway


def same_text(gw: Gateway, route: str, kind: str, got: str | None) -> None:
    """The SDK read exactly what the gateway answers over plain HTTP (greedy: deterministic)."""
    assert got == gw.expect[route, kind], (got, gw.expect[route, kind])


def joined(pieces: Iterable[str | None]) -> str:
    return "".join(p or "" for p in pieces)


def echoed(text: str, tokens: Sequence[str], token_logprobs: Sequence[float | None],
           text_offset: Sequence[int] | None = None) -> None:
    """Echo with logprobs: the text leads with the prompt, the prompt's tokens lead the logprobs,
    the first of them null (nothing predicts it), every other a real number, offsets from 0."""
    assert text.startswith(PROMPT), text
    assert "".join(tokens).startswith(PROMPT) and "".join(tokens) == text, (tokens, text)
    assert token_logprobs[0] is None, token_logprobs
    rest = token_logprobs[1:]
    assert rest and all(isinstance(v, float) and v <= 0 for v in rest), token_logprobs
    assert len(tokens) > MAX_TOKENS  # the prompt's tokens, then the completion's
    if text_offset is not None:
        assert text_offset[0] == 0 and list(text_offset) == sorted(text_offset)


WEATHER = {"type": "function", "function": {
    "name": "weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                   "required": ["city"]}}}
NAMED = {"type": "function", "function": {"name": "weather"}}
TOOL_TOKENS = 64  # room for the whole call


def called(name: str, arguments: str | dict[str, Any]) -> None:
    """A call of the weather tool whose arguments fit its schema."""
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    assert name == "weather" and args.get("city") in ("Paris", "Rome"), (name, arguments)


def names(detail: Any) -> str:
    """The parameter a FastAPI 422 body blames."""
    assert isinstance(detail, dict) and detail["detail"][0]["loc"][0] == "body", detail
    return ".".join(str(x) for x in detail["detail"][0]["loc"][1:])
