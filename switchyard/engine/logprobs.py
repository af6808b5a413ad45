"""Token log-probabilities in the canonical shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from switchyard.core.canonical import TokenLogprob, TopLogprob


class TokenTable:
    """Each token id's text and raw bytes, decoded once and cached."""

    def __init__(self, ll_tokenizer: Callable[[], Any]) -> None:
        self._ll = ll_tokenizer  # called on first use: the llguidance tokenizer is built lazily
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def get(self, token: int) -> tuple[str, list[int]]:
        hit = self._cache.get(token)
        if hit is None:
            raw = self._ll().decode_bytes([token])
            hit = (raw.decode("utf-8", errors="replace"), list(raw))
            self._cache[token] = hit
        return hit


def build(table: TokenTable, logp: torch.Tensor, chosen: int, top: int) -> TokenLogprob:
    """``logp`` is one row of log-probabilities over the vocabulary."""
    text, raw = table.get(chosen)
    alts: list[TopLogprob] = []
    if top > 0:
        values, ids = torch.topk(logp, top)
        alts = [TopLogprob(table.get(i)[0], v) for v, i in zip(values.tolist(), ids.tolist(), strict=True)]
    return TokenLogprob(token=text, logprob=float(logp[chosen]), top=alts, bytes=raw)


def prompt_logprobs(table: TokenTable, logits: torch.Tensor, ids: list[int], top: int) -> list[TokenLogprob]:
    """Logprobs of each prompt token given the ones before it; ``logits[i]`` predicts ``ids[i+1]``.
    The first token has no context: its logprob is None (JSON null, as OpenAI answers)."""
    first_text, first_raw = table.get(ids[0])
    out = [TokenLogprob(token=first_text, logprob=None, top=[], bytes=first_raw)]
    logp = logits.float().log_softmax(dim=-1)
    for i in range(1, len(ids)):
        out.append(build(table, logp[i - 1], ids[i], top))
    return out
