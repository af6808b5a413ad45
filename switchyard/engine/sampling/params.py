"""Per-sequence sampling parameters: the request's values over its dialect's defaults."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import torch

from switchyard.core.canonical import CanonicalRequest, Dry, Mirostat
from switchyard.core.errors import InvalidRequest
from switchyard.dialects.defaults import sampling_defaults


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    typical_p: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] | None = None
    dry: Dry | None = None
    mirostat: Mirostat | None = None
    seed: int | None = None
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def resolve(req: CanonicalRequest, choice: int = 0) -> SamplingParams:
    """The sampling parameters for one choice: unset fields take the dialect's defaults."""
    d = sampling_defaults(req.dialect)

    def pick(name: str) -> Any:
        v = getattr(req, name)
        return d.get(name) if v is None else v

    p = SamplingParams(
        temperature=float(pick("temperature")),
        top_k=int(pick("top_k") or 0),
        top_p=float(pick("top_p")),
        min_p=float(pick("min_p")),
        typical_p=float(pick("typical_p")),
        presence_penalty=float(pick("presence_penalty")),
        frequency_penalty=float(pick("frequency_penalty")),
        repetition_penalty=float(pick("repetition_penalty")),
        logit_bias=req.logit_bias or None,
        dry=req.dry if req.dry and req.dry.multiplier > 0 else None,
        mirostat=req.mirostat if req.mirostat and req.mirostat.mode else None,
        seed=None if req.seed is None else req.seed + choice,
        ignore_eos=bool(pick("ignore_eos")),
    )
    return p


def check(cond: bool, param: str, message: str) -> None:
    if not cond:
        raise InvalidRequest(message, param=param)


@dataclass
class RowState:
    """What the processors see of one batch row: its parameters and token history."""

    params: SamplingParams
    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    generator: torch.Generator = field(default_factory=torch.Generator)
    mu: float = 0.0  # mirostat's running surprise bound
    breaker_ids: frozenset[int] = frozenset()  # DRY sequence breakers as token ids

    def __post_init__(self) -> None:
        seed = self.params.seed if self.params.seed is not None else secrets.randbits(63)
        self.generator.manual_seed(seed)
        if self.params.mirostat:
            self.mu = 2.0 * self.params.mirostat.tau
