"""Truncation samplers: top_k, top_p (nucleus), min_p and typical_p. Each masks the tokens it
drops with -inf, per row, and always keeps at least the most likely token."""

from __future__ import annotations

import torch

from switchyard.engine.sampling.base import LogitsProcessor
from switchyard.engine.sampling.params import SamplingParams, check

NEG_INF = float("-inf")


class _Truncation(LogitsProcessor):
    field = ""
    off: float = 0.0

    def is_active(self, p: SamplingParams) -> bool:
        # Mirostat does its own truncation (as in llama.cpp); greedy rows need none.
        return getattr(p, self.field) != self.off and p.mirostat is None and not p.greedy

    def update_state(self, rows: list) -> None:
        super().update_state(rows)
        self.idx = torch.tensor(self.active, dtype=torch.long)
        values = [float(getattr(rows[i].params, self.field)) for i in self.active]
        self.value = torch.tensor(values).view(-1, 1)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.active:
            logits[self.idx] = self.truncate(logits[self.idx])
        return logits

    def truncate(self, logits: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class TopK(_Truncation):
    field, off = "top_k", 0

    def validate(self, p: SamplingParams, vocab_size: int) -> None:
        check(p.top_k >= 0 or p.top_k == -1, "top_k", f"top_k must be >= 0 (0 or -1 = off), got {p.top_k}")

    def is_active(self, p: SamplingParams) -> bool:
        return p.top_k > 0 and super().is_active(p)

    def truncate(self, logits: torch.Tensor) -> torch.Tensor:
        k = self.value.long().clamp(max=logits.shape[1])
        top = torch.topk(logits, int(k.max()), dim=1).values
        kth = top.gather(1, k - 1)
        return logits.masked_fill(logits < kth, NEG_INF)


class TopP(_Truncation):
    field, off = "top_p", 1.0

    def validate(self, p: SamplingParams, vocab_size: int) -> None:
        check(0.0 < p.top_p <= 1.0, "top_p", f"top_p must be in (0, 1], got {p.top_p}")

    def truncate(self, logits: torch.Tensor) -> torch.Tensor:
        sorted_logits, order = torch.sort(logits, dim=1, descending=True)
        probs = sorted_logits.softmax(dim=1)
        before = probs.cumsum(dim=1) - probs  # mass strictly above each token
        drop = before > self.value
        drop[:, 0] = False
        return logits.scatter(1, order, sorted_logits.masked_fill(drop, NEG_INF))


class MinP(_Truncation):
    field, off = "min_p", 0.0

    def validate(self, p: SamplingParams, vocab_size: int) -> None:
        check(0.0 <= p.min_p <= 1.0, "min_p", f"min_p must be in [0, 1], got {p.min_p}")

    def truncate(self, logits: torch.Tensor) -> torch.Tensor:
        probs = logits.softmax(dim=1)
        floor = probs.max(dim=1, keepdim=True).values * self.value
        return logits.masked_fill(probs < floor, NEG_INF)


class TypicalP(_Truncation):
    """Locally typical sampling: keep the tokens whose surprise is closest to the entropy, up to
    typical_p of the mass."""

    field, off = "typical_p", 1.0

    def validate(self, p: SamplingParams, vocab_size: int) -> None:
        check(0.0 < p.typical_p <= 1.0, "typical_p", f"typical_p must be in (0, 1], got {p.typical_p}")

    def truncate(self, logits: torch.Tensor) -> torch.Tensor:
        logp = logits.log_softmax(dim=1)
        p = logp.exp()
        entropy = -(torch.nan_to_num(p * logp)).sum(dim=1, keepdim=True)
        shifted = (-logp - entropy).abs()
        _sorted_shift, order = torch.sort(shifted, dim=1)
        cum = p.gather(1, order).cumsum(dim=1)
        last = (cum < self.value).sum(dim=1, keepdim=True).clamp(max=logits.shape[1] - 1)
        keep_sorted = torch.arange(logits.shape[1]).view(1, -1) <= last
        keep = torch.zeros_like(keep_sorted).scatter(1, order, keep_sorted)
        return logits.masked_fill(~keep, NEG_INF)
