"""DRY ("don't repeat yourself"): penalise the token that would extend a repeat of an earlier
sequence, by multiplier * base ** (match_length - allowed_length). Matches do not cross
sequence breakers. Follows text-generation-webui's reference implementation."""

from __future__ import annotations

import torch

from switchyard.engine.sampling.base import LogitsProcessor
from switchyard.engine.sampling.params import SamplingParams, check

WINDOW = 1024  # how far back to look for repeats; bounds the per-step cost


def dry_penalties(history: list[int], breakers: frozenset[int], multiplier: float, base: float,
                  allowed_length: int) -> dict[int, float]:
    """token -> penalty for one row."""
    ids = history[-WINDOW:]
    if len(ids) < 2 or ids[-1] in breakers:
        return {}
    last = ids[-1]
    n = len(ids)
    match_lengths: dict[int, int] = {}
    for idx in range(n - 1):
        if ids[idx] != last:
            continue
        nxt = ids[idx + 1]
        if nxt in breakers:
            continue
        length = 1
        while True:
            j = idx - length
            if j < 0:
                break
            prev = ids[n - 1 - length]
            if ids[j] != prev or prev in breakers:
                break
            length += 1
        if length > match_lengths.get(nxt, 0):
            match_lengths[nxt] = length
    return {tok: multiplier * base ** (m - allowed_length)
            for tok, m in match_lengths.items() if m >= allowed_length}


class DryPenalty(LogitsProcessor):
    def validate(self, p: SamplingParams, vocab_size: int) -> None:
        if p.dry is None:
            return
        check(p.dry.multiplier >= 0, "dry", "dry multiplier must be >= 0")
        check(p.dry.base > 1, "dry", f"dry base must be > 1, got {p.dry.base}")
        check(p.dry.allowed_length >= 1, "dry", "dry allowed_length must be >= 1")

    def is_active(self, p: SamplingParams) -> bool:
        return p.dry is not None and p.dry.multiplier > 0

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for i in self.active:
            r = self.rows[i]
            d = r.params.dry
            assert d is not None  # an active row has one (is_active)
            pen = dry_penalties(r.prompt_ids + r.output_ids, r.breaker_ids, d.multiplier, d.base,
                                d.allowed_length)
            if pen:
                logits[i, torch.tensor(list(pen))] -= torch.tensor(list(pen.values()))
        return logits
