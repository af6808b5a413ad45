"""The fields passed-through params may never set are derived from the dialect tables; this proves
the derivation covers every body field the gateway itself writes, in every upstream dialect."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from switchyard.core.canonical import CanonicalRequest, Constraint, Dry, Mirostat
from switchyard.core.errors import InvalidRequest
from switchyard.dialects.registry import DIALECTS, owned_fields
from switchyard.providers.openai.request import render_request

# One value for every canonical field an upstream body can carry.
SAID: dict[str, Any] = {
    "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 5, "min_p": 0.1, "typical_p": 0.9,
    "presence_penalty": 0.1, "frequency_penalty": 0.1, "repetition_penalty": 1.1,
    "mirostat": Mirostat(2), "dry": Dry(0.8), "logit_bias": {1: 1.0}, "seed": 1, "ignore_eos": True,
    "stop": ["x"], "include_stop_str_in_output": True, "n": 2, "best_of": 3, "logprobs": 2,
    "echo": True, "suffix": "s", "constraint": Constraint("regex", "[0-9]+"), "overflow": "truncate_prompt",
    "cache_prompt": True, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto",
    "user": "u", "timeout": 5.0, "stream": True, "include_usage": True,
}
KINDS = [("completion", {"prompt": ["hi"]}), ("chat", {"messages": [{"role": "user", "content": "hi"}]})]


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize(("kind", "base"), KINDS, ids=[k for k, _ in KINDS])
def test_every_field_the_gateway_writes_is_owned(dialect: str, kind: str, base: dict[str, Any]):
    base_req = CanonicalRequest(kind=kind, model="v/m", dialect="openai", **base)  # type: ignore[arg-type]
    written: set[str] = set()
    for field, value in SAID.items():
        try:
            body, _ = render_request(DIALECTS[dialect], replace(base_req, **{field: value}), "up")
        except InvalidRequest:
            continue  # this upstream cannot carry it: refused, nothing written
        written |= set(body)
    assert len(written) > 8  # the renders did write
    assert written <= owned_fields(), sorted(written - owned_fields())


def test_vendor_extensions_are_not_owned():
    assert {"priority", "top_a", "guided_decoding_backend", "chat_template_kwargs"}.isdisjoint(owned_fields())
