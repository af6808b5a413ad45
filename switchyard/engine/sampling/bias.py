"""logit_bias: add a fixed bias to chosen token ids (OpenAI: -100..100)."""

from __future__ import annotations

import torch

from switchyard.engine.sampling.base import LogitsProcessor
from switchyard.engine.sampling.params import SamplingParams, check


class LogitBias(LogitsProcessor):
    def validate(self, p: SamplingParams, vocab_size: int) -> None:
        for tok, bias in (p.logit_bias or {}).items():
            check(0 <= int(tok) < vocab_size, "logit_bias",
                  f"logit_bias token id {tok} is not in the vocabulary")
            check(-100 <= float(bias) <= 100, "logit_bias", f"logit_bias value {bias} must be in [-100, 100]")

    def is_active(self, p: SamplingParams) -> bool:
        return bool(p.logit_bias)

    def update_state(self, rows: list) -> None:
        super().update_state(rows)
        r, c, v = [], [], []
        for i in self.active:
            for tok, bias in rows[i].params.logit_bias.items():
                r.append(i)
                c.append(int(tok))
                v.append(float(bias))
        self.index = (torch.tensor(r, dtype=torch.long), torch.tensor(c, dtype=torch.long))
        self.values = torch.tensor(v)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.active:
            logits.index_put_(self.index, self.values, accumulate=True)
        return logits
