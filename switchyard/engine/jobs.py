"""A request becomes a Job: checked against the engine's limits, its prompts tokenized and fitted
to the window, one sequence per prompt and choice with its sampling state, stop scanner and
constraint matcher."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.errors import InvalidRequest
from switchyard.core.stops import StopScanner
from switchyard.dialects.defaults import sampling_defaults
from switchyard.engine.constraints import Constraints
from switchyard.engine.prompts import build_prompts, fit
from switchyard.engine.sampling.params import RowState, resolve
from switchyard.engine.sampling.pipeline import Pipeline
from switchyard.engine.sequence import Job, Seq
from switchyard.engine.stops import Detokenizer, detokenizer_for

MAX_LOGPROBS = 20


@dataclass
class JobBuilder:
    tokenizer: Any
    slots: int
    vocab_size: int
    context_window: int
    constraints: Constraints
    pipeline: Pipeline
    detokenizer: Callable[[list[int]], Detokenizer] = field(init=False)

    def __post_init__(self) -> None:
        self.detokenizer = detokenizer_for(self.tokenizer)

    def build(self, rid: int, req: CanonicalRequest) -> Job:
        """The request's Job, or InvalidRequest naming the parameter beyond a limit."""
        d = sampling_defaults(req.dialect)
        n = req.n if req.n is not None else int(d.get("n", 1))
        best_of = req.best_of if req.best_of is not None else n
        if not 1 <= n <= self.slots:
            raise InvalidRequest(f"n must be in [1, {self.slots}], got {n}", param="n")
        if not n <= best_of <= self.slots:
            raise InvalidRequest(f"best_of must be in [n, {self.slots}], got {best_of}", param="best_of")
        if req.stream and best_of > n:
            raise InvalidRequest("best_of > n cannot be streamed", param="best_of")
        if req.logprobs is not None and not 0 <= req.logprobs <= MAX_LOGPROBS:
            raise InvalidRequest(f"logprobs must be in [0, {MAX_LOGPROBS}], got {req.logprobs}",
                                 param="logprobs")
        prompts = build_prompts(self.tokenizer, req, self.vocab_size)
        max_tokens = [fit(req, p, self.context_window) for p in prompts]
        matcher = self.constraints.matcher(req.constraint) if req.constraint else None
        include_stop = req.include_stop_str_in_output
        if include_stop is None:
            include_stop = bool(d.get("include_stop_str_in_output"))
        if req.stop is not None and not all(isinstance(s, str) for s in req.stop):
            raise InvalidRequest("stop must be a list of strings", param="stop")
        job = Job(rid, req, prompts, n, best_of, want_logprobs=req.logprobs is not None or best_of > n)
        job.cached = [0] * len(prompts)
        job.prompt_logprobs = [None] * len(prompts)
        breakers = self._breakers(req)
        for pi, p in enumerate(prompts):
            for c in range(best_of):
                params = resolve(req, c)
                self.pipeline.validate(params, self.vocab_size)
                row = RowState(params, p.ids, breaker_ids=breakers)
                job.seqs.append(Seq(job, pi, c, row, max_tokens[pi], self.detokenizer(p.ids),
                                    StopScanner(req.stop or [], include_stop),
                                    matcher.deep_copy() if matcher else None))
        return job

    def _breakers(self, req: CanonicalRequest) -> frozenset[int]:
        if req.dry is None:
            return frozenset()
        ids: set[int] = set()
        for s in req.dry.sequence_breakers:
            ids.update(self.tokenizer.encode(s, add_special_tokens=False))
        return frozenset(ids)
