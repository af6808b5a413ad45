"""The processors in order, and the sampler at the end."""

from __future__ import annotations

import torch

from backends.engine.sampling.base import LogitsProcessor
from backends.engine.sampling.bias import LogitBias
from backends.engine.sampling.dry import DryPenalty
from backends.engine.sampling.mirostat import MirostatSampler
from backends.engine.sampling.params import RowState, SamplingParams
from backends.engine.sampling.penalties import PresenceFrequencyPenalty, RepetitionPenalty
from backends.engine.sampling.temperature import Temperature
from backends.engine.sampling.truncation import MinP, TopK, TopP, TypicalP


class Pipeline:
    """Penalties first, then temperature, then truncation (llama.cpp's and vLLM's order)."""

    def __init__(self) -> None:
        self.processors: list[LogitsProcessor] = [
            LogitBias(), RepetitionPenalty(), PresenceFrequencyPenalty(), DryPenalty(),
            Temperature(), MirostatSampler(), TopK(), TypicalP(), TopP(), MinP(),
        ]
        self._rows: list[RowState] = []
        self._key: tuple[int, ...] = ()
        self._on: list[LogitsProcessor] = []
        self._watching: list[LogitsProcessor] = []
        self._greedy: list[int] = []

    def validate(self, p: SamplingParams, vocab_size: int) -> None:
        for proc in self.processors:
            proc.validate(p, vocab_size)

    def update_state(self, rows: list[RowState]) -> None:
        key = tuple(id(r) for r in rows)
        if key != self._key:
            self._key, self._rows = key, list(rows)
            for proc in self.processors:
                proc.update_state(self._rows)
            self._on = [p for p in self.processors if p.active]
            self._watching = [p for p in self._on if type(p).on_sampled is not LogitsProcessor.on_sampled]
            self._greedy = [i for i, r in enumerate(rows) if r.params.greedy]

    def sample(self, logits: torch.Tensor, rows: list[RowState]) -> list[int]:
        """Process ``logits`` ``[rows, vocab]`` in place and draw one token per row."""
        self.update_state(rows)
        for proc in self._on:
            logits = proc.apply(logits)
        greedy = self._greedy
        if len(greedy) == len(rows):  # all greedy: one argmax over the batch
            tokens = logits.argmax(dim=1).tolist()
        else:
            tokens = [0] * len(rows)
            if greedy:
                picks = logits[greedy].argmax(dim=1).tolist()
                for i, t in zip(greedy, picks, strict=True):
                    tokens[i] = t
            probs = logits.softmax(dim=1)
            for i, r in enumerate(rows):
                if not r.params.greedy:
                    tokens[i] = int(torch.multinomial(probs[i], 1, generator=r.generator))
        if self._watching:
            logp = logits.log_softmax(dim=1)
            for proc in self._watching:
                proc.on_sampled(tokens, logp)
        return tokens
