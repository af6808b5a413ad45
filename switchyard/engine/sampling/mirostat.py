"""Mirostat v1 and v2 (llama.cpp's): keep the output's surprise near tau by truncating to the
tokens whose surprise is within a running bound mu, then moving mu by eta * (observed - tau)."""

from __future__ import annotations

import math

import torch

from switchyard.engine.sampling.base import LogitsProcessor
from switchyard.engine.sampling.params import SamplingParams, check

NEG_INF = float("-inf")
V1_M = 100  # tokens used to estimate the Zipf exponent (llama.cpp's m)


class MirostatSampler(LogitsProcessor):
    def validate(self, p: SamplingParams, vocab_size: int) -> None:
        m = p.mirostat
        if m is None:
            return
        check(m.mode in (1, 2), "mirostat", f"mirostat mode must be 1 or 2, got {m.mode}")
        check(m.tau > 0, "mirostat", f"mirostat tau must be > 0, got {m.tau}")
        check(0 < m.eta <= 1, "mirostat", f"mirostat eta must be in (0, 1], got {m.eta}")

    def is_active(self, p: SamplingParams) -> bool:
        return p.mirostat is not None and not p.greedy

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for i in self.active:
            r = self.rows[i]
            m = r.params.mirostat
            assert m is not None  # an active row has one (is_active)
            logits[i] = truncate(logits[i], m.mode, r.mu)
        return logits

    def on_sampled(self, tokens: list[int], logprobs: torch.Tensor) -> None:
        for i in self.active:
            r = self.rows[i]
            surprise = -float(logprobs[i, tokens[i]]) / math.log(2)
            m = r.params.mirostat
            assert m is not None
            r.mu -= m.eta * (surprise - m.tau)


def truncate(logits: torch.Tensor, mode: int, mu: float) -> torch.Tensor:
    """One row's logits truncated for the current mu."""
    sorted_logits, order = torch.sort(logits, descending=True)
    logp = sorted_logits.log_softmax(dim=0)
    n = logits.shape[0]
    if mode == 2:
        surprise = -logp / math.log(2)
        keep = max(1, int((surprise <= mu).sum()))
    else:
        m = min(V1_M, n - 1)
        i = torch.arange(m, dtype=torch.float64)
        t = torch.log((i + 2) / (i + 1))
        b = (logp[:m] - logp[1 : m + 1]).double()
        finite = torch.isfinite(b)
        t, b = t[finite], b[finite]
        s_hat = float((t * b).sum() / (t * t).sum()) if len(t) else 1.0
        eps = s_hat - 1
        if abs(eps) < 1e-6:
            eps = 1e-6
        try:
            k = ((eps * 2**mu) / (1 - n ** (-eps))) ** (1 / s_hat)
        except (OverflowError, ZeroDivisionError):
            k = float(n)
        keep = max(1, min(n, int(k) if math.isfinite(k) else n))
    out = torch.full_like(logits, NEG_INF)
    out[order[:keep]] = sorted_logits[:keep]
    return out
