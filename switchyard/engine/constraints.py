"""Structured output with llguidance: each constraint compiles to a grammar, each sequence
gets a matcher, and every step the matcher's token mask is applied to that row's logits."""

from __future__ import annotations

import functools
import json
from typing import Any

import llguidance
import llguidance.hf
import torch
from llguidance.gbnf_to_lark import any_to_lark

from switchyard.core.canonical import Constraint
from switchyard.core.errors import InvalidRequest

NEG_INF = float("-inf")
# Compact JSON: with flexible whitespace a small model can pad forever between tokens. A schema
# may still override this through its "x-guidance" key.
JSON_OPTIONS: llguidance.JsonCompileOptions = {"whitespace_flexible": False}  # type: ignore[name-defined]  # in the stub only


def grammar_for(c: Constraint) -> str:
    """The llguidance grammar text for a canonical constraint (not yet checked)."""
    try:
        if c.kind == "json_schema":
            schema = c.value if isinstance(c.value, (dict, str)) else None
            if schema is None:
                raise ValueError("json_schema must be a JSON object")
            return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
        if c.kind == "json_object":
            return llguidance.LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=JSON_OPTIONS)
        if c.kind == "regex":
            if not isinstance(c.value, str):
                raise ValueError("regex must be a string")
            return llguidance.LLMatcher.grammar_from_regex(c.value)
        if c.kind == "choice":
            if not isinstance(c.value, list) or not c.value or not all(isinstance(x, str) for x in c.value):
                raise ValueError("choice must be a non-empty list of strings")
            lark = "start: " + " | ".join(json.dumps(x) for x in c.value)
            return llguidance.LLMatcher.grammar_from_lark(lark)
        if c.kind == "grammar":
            if not isinstance(c.value, str):
                raise ValueError("grammar must be GBNF text")
            return llguidance.LLMatcher.grammar_from_lark(any_to_lark(c.value))
        if c.kind == "lark":
            if not isinstance(c.value, str):
                raise ValueError("lark must be Lark text")
            return llguidance.LLMatcher.grammar_from_lark(c.value)
    except InvalidRequest:
        raise
    except Exception as e:
        raise InvalidRequest(f"invalid {c.kind} constraint: {e}", param="constraint") from None
    raise InvalidRequest(f"unknown constraint kind {c.kind!r}", param="constraint")


class Constraints:
    """Per-model llguidance state: the tokenizer view and matcher construction."""

    def __init__(self, hf_tokenizer: Any, vocab_size: int, eos: list[int]) -> None:
        self.vocab_size = vocab_size
        self._hf, self._eos = hf_tokenizer, eos[0]
        self.words = (vocab_size + 31) // 32

    @functools.cached_property
    def ll_tokenizer(self) -> llguidance.LLTokenizer:
        """Built on first use (a constraint or logprobs): ~35 MiB resident and ~0.4 s for
        SmolLM2's 49k vocabulary, which an engine never asked for either should not hold."""
        return llguidance.hf.from_tokenizer(self._hf, n_vocab=self.vocab_size, eos_token=self._eos)

    def matcher(self, c: Constraint) -> llguidance.LLMatcher:
        grammar = grammar_for(c)
        m = llguidance.LLMatcher(self.ll_tokenizer, grammar, log_level=0)
        if m.is_error():
            raise InvalidRequest(f"invalid {c.kind} constraint: {m.get_error()}", param="constraint")
        return m

    def apply(self, logits: torch.Tensor, rows: list[int], matchers: list[llguidance.LLMatcher]) -> None:
        """Mask ``logits[rows[i]]`` with ``matchers[i]``'s allowed tokens, in place."""
        if not rows:
            return
        mask = torch.empty((len(rows), self.words), dtype=torch.int32)
        for j, m in enumerate(matchers):
            v = mask[j]
            m.unsafe_compute_mask_ptr(v.data_ptr(), v.numel() * 4)
        bits = (mask.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1
        allowed = bits.view(len(rows), -1)[:, : logits.shape[1]].bool()
        idx = torch.tensor(rows)
        logits[idx] = logits[idx].masked_fill(~allowed, NEG_INF)
