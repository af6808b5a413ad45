"""Temperature scaling. Temperature 0 means greedy: those rows are left as they are and the
sampler takes their argmax."""

from __future__ import annotations

import torch

from switchyard.engine.sampling.base import LogitsProcessor
from switchyard.engine.sampling.params import SamplingParams, check


class Temperature(LogitsProcessor):
    def validate(self, p: SamplingParams, vocab_size: int) -> None:
        check(0.0 <= p.temperature <= 100.0, "temperature",
              f"temperature must be in [0, 100], got {p.temperature}")

    def is_active(self, p: SamplingParams) -> bool:
        return p.temperature not in (0.0, 1.0)

    def update_state(self, rows: list) -> None:
        super().update_state(rows)
        t = [r.params.temperature if self.is_active(r.params) else 1.0 for r in rows]
        self.t = torch.tensor(t).view(-1, 1)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return logits / self.t if self.active else logits
