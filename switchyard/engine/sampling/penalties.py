"""Repetition (multiplicative, over prompt and output), presence and frequency (additive, over
the output) penalties."""

from __future__ import annotations

import torch

from switchyard.engine.sampling.base import LogitsProcessor
from switchyard.engine.sampling.params import SamplingParams, check


def _counts(histories: list[list[int]], vocab: int) -> torch.Tensor:
    """``[rows, vocab]`` occurrence counts of each row's tokens."""
    out = torch.zeros(len(histories), vocab)
    for i, h in enumerate(histories):
        if h:
            out[i].index_add_(0, torch.tensor(h, dtype=torch.long), torch.ones(len(h)))
    return out


class RepetitionPenalty(LogitsProcessor):
    """CTRL's penalty: a seen token's logit is divided by p when positive, multiplied when not."""

    def validate(self, p: SamplingParams, vocab_size: int) -> None:
        check(0 < p.repetition_penalty <= 2 or p.repetition_penalty == 1, "repetition_penalty",
              f"repetition_penalty must be in (0, 2], got {p.repetition_penalty}")

    def is_active(self, p: SamplingParams) -> bool:
        return p.repetition_penalty != 1.0

    def update_state(self, rows: list) -> None:
        super().update_state(rows)
        self.penalty = torch.tensor([rows[i].params.repetition_penalty for i in self.active]).view(-1, 1)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.active:
            return logits
        idx = torch.tensor(self.active)
        seen = _counts([self.rows[i].prompt_ids + self.rows[i].output_ids for i in self.active],
                       logits.shape[1]) > 0
        sub = logits[idx]
        penalised = torch.where(sub > 0, sub / self.penalty, sub * self.penalty)
        logits[idx] = torch.where(seen, penalised, sub)
        return logits


class PresenceFrequencyPenalty(LogitsProcessor):
    """OpenAI's: logit -= frequency * count + presence * (count > 0), over generated tokens."""

    def validate(self, p: SamplingParams, vocab_size: int) -> None:
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(p, name)
            check(-2.0 <= v <= 2.0, name, f"{name} must be in [-2, 2], got {v}")

    def is_active(self, p: SamplingParams) -> bool:
        return p.presence_penalty != 0.0 or p.frequency_penalty != 0.0

    def update_state(self, rows: list) -> None:
        super().update_state(rows)
        self.presence = torch.tensor([rows[i].params.presence_penalty for i in self.active]).view(-1, 1)
        self.frequency = torch.tensor([rows[i].params.frequency_penalty for i in self.active]).view(-1, 1)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.active:
            return logits
        idx = torch.tensor(self.active)
        counts = _counts([self.rows[i].output_ids for i in self.active], logits.shape[1])
        logits[idx] -= self.frequency * counts + self.presence * (counts > 0).float()
        return logits
