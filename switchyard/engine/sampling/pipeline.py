"""The processors in order, and the sampler at the end.

Drawing is vectorized: a row's token is ``argmax(probs / E)`` with ``E`` standard exponential
noise (the exponential race, equal in distribution to a multinomial draw), so the whole batch is
one softmax, one division and one argmax. Rows without a seed share one generator (one draw for
all of them); a row with a seed draws its noise from its own generator, so its output does not
depend on what else is batched.
"""

from __future__ import annotations

import secrets

import torch

from switchyard.engine.sampling.base import LogitsProcessor
from switchyard.engine.sampling.bias import LogitBias
from switchyard.engine.sampling.dry import DryPenalty
from switchyard.engine.sampling.mirostat import MirostatSampler
from switchyard.engine.sampling.params import RowState, SamplingParams
from switchyard.engine.sampling.penalties import PresenceFrequencyPenalty, RepetitionPenalty
from switchyard.engine.sampling.temperature import Temperature
from switchyard.engine.sampling.truncation import MinP, TopK, TopP, TypicalP


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
        self._seeded: list[int] = []
        self.shared = torch.Generator()
        self.shared.manual_seed(secrets.randbits(63))

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
            self._seeded = [i for i, r in enumerate(rows)
                            if not r.params.greedy and r.params.seed is not None]

    def plain(self, rows: list[RowState]) -> bool:
        """Every row greedy, no processor active or watching: ``sample`` is the argmax alone (it
        runs on any device)."""
        self.update_state(rows)
        return not self._on and not self._watching and len(self._greedy) == len(rows)

    def sample(self, logits: torch.Tensor, rows: list[RowState]) -> list[int]:
        """Process ``logits`` ``[rows, vocab]`` in place and draw one token per row."""
        self.update_state(rows)
        for proc in self._on:
            logits = proc.apply(logits)
        if len(self._greedy) == len(rows):  # all greedy: one argmax over the batch
            tokens = logits.argmax(dim=1).tolist()
        else:
            noise = torch.empty_like(logits).exponential_(generator=self.shared)
            for i in self._seeded:
                noise[i].exponential_(generator=rows[i].generator)
            noise.clamp_(min=torch.finfo(noise.dtype).tiny)  # a zero would make any token win
            scores = logits.softmax(dim=1).div_(noise)
            if self._greedy:  # greedy rows take their plain argmax
                scores[self._greedy] = logits[self._greedy]
            tokens = scores.argmax(dim=1).tolist()
        if self._watching:
            logp = logits.log_softmax(dim=1)
            for proc in self._watching:
                proc.on_sampled(tokens, logp)
        return tokens
