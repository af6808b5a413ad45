"""The logits processor interface."""

from __future__ import annotations

import torch

from switchyard.engine.sampling.params import RowState, SamplingParams


class LogitsProcessor:
    """One step of the pipeline.

    ``validate`` runs when a request is admitted; ``update_state`` when the batch's rows change
    (rows joined, left or moved); ``apply`` on every step with the ``[rows, vocab]`` logits.
    """

    def validate(self, p: SamplingParams, vocab_size: int) -> None:
        """Raise InvalidRequest naming the parameter when a value is out of range."""

    def is_active(self, p: SamplingParams) -> bool:
        raise NotImplementedError

    def update_state(self, rows: list[RowState]) -> None:
        self.rows = rows
        self.active = [i for i, r in enumerate(rows) if self.is_active(r.params)]

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def on_sampled(self, tokens: list[int], logprobs: torch.Tensor) -> None:
        """Called with the chosen tokens and the final distribution's log-probabilities."""
