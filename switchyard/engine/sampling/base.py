"""The logits processor interface (vLLM's ``LogitsProcessor`` shape): what each processor
declares, and the row bookkeeping they share."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from switchyard.engine.sampling.params import RowState, SamplingParams


class LogitsProcessor(ABC):
    """One step of the pipeline.

    ``validate`` runs when a request is admitted; ``update_state`` when the batch's rows change
    (rows joined, left or moved); ``apply`` on every step with the ``[rows, vocab]`` logits, to
    the rows ``is_active`` picked; ``on_sampled`` after the step's tokens are chosen.
    """

    def __init__(self) -> None:
        self.rows: list[RowState] = []  # the batch's rows, in logits order
        self.active: list[int] = []  # indices of the rows this processor changes

    @abstractmethod
    def validate(self, p: SamplingParams, vocab_size: int) -> None:
        """Raise InvalidRequest naming the parameter when a value is out of range."""

    @abstractmethod
    def is_active(self, p: SamplingParams) -> bool:
        """Whether a row with these parameters needs this processor at all."""

    def update_state(self, rows: list[RowState]) -> None:
        """The batch changed: remember its rows and which are active (subclasses also rebuild
        their per-row tensors here)."""
        self.rows = rows
        self.active = [i for i, r in enumerate(rows) if self.is_active(r.params)]

    @abstractmethod
    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """The step's ``[rows, vocab]`` logits, changed for the active rows."""

    def on_sampled(self, tokens: list[int], logprobs: torch.Tensor) -> None:  # noqa: B027 -- optional hook
        """Called with the chosen tokens and the final distribution's log-probabilities (only
        processors that override it are called: see ``pipeline.Pipeline.update_state``)."""
