"""One request in the engine (a Job) and its sequences (one per prompt and choice), with what
each sequence has produced but not yet sent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from switchyard.core.canonical import CanonicalRequest, Chunk, FinishReason, TokenLogprob, Usage
from switchyard.core.stops import StopScanner
from switchyard.engine.prompts import Prompt
from switchyard.engine.sampling.params import RowState
from switchyard.engine.stops import Detokenizer

Emit = Callable[[tuple[Any, ...]], None]


@dataclass(eq=False)
class Job:
    rid: int
    req: CanonicalRequest
    prompts: list[Prompt]
    n: int
    best_of: int
    want_logprobs: bool  # the caller asked for logprobs, or best_of needs them for ranking
    seqs: list[Seq] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)  # per prompt
    prompt_logprobs: list[list[TokenLogprob] | None] = field(default_factory=list)
    cancelled: bool = False

    @property
    def buffered(self) -> bool:
        """best_of > n: every candidate must finish before the best n are known."""
        return self.best_of > self.n

    @property
    def done(self) -> bool:
        return all(s.finish is not None for s in self.seqs)

    def usage(self) -> Usage:
        return Usage(
            prompt_tokens=sum(len(p.ids) for p in self.prompts),
            completion_tokens=sum(len(s.row.output_ids) for s in self.seqs),
            cached_tokens=sum(self.cached),
        )


@dataclass(eq=False)
class Seq:
    job: Job
    prompt_index: int
    choice: int  # 0..best_of-1
    row: RowState
    max_tokens: int
    detok: Detokenizer
    stops: StopScanner
    matcher: Any = None  # llguidance.LLMatcher
    slot: int = -1
    pending: int | None = None  # sampled, not yet in the KV cache
    rest: list[int] = field(default_factory=list)  # prompt tokens not yet run (chunked prefill)
    chunks: int = 0  # prefill chunks run for it
    finish: FinishReason | None = None
    stop_word: str | None = None
    # Produced since the last chunk:
    text: str = ""
    logprobs: list[TokenLogprob] = field(default_factory=list)
    tokens: int = 0
    started: bool = False
    cum_logprob: float = 0.0

    @property
    def prompt(self) -> Prompt:
        return self.job.prompts[self.prompt_index]

    def chunk(self, index: int) -> Chunk:
        """Take what is pending as a chunk."""
        job = self.job
        c = Chunk(index=index, text=self.text, finish_reason=self.finish, tokens=self.tokens,
                  stop_word=self.stop_word)
        if job.req.logprobs is not None:
            c.logprobs = self.logprobs
        if not self.started:
            self.started = True
            if job.req.kind == "chat":
                c.role = "assistant"
            elif job.req.echo:
                c.text = self.prompt.text + c.text
                c.prompt_logprobs = job.prompt_logprobs[self.prompt_index]
        self.text, self.logprobs, self.tokens = "", [], 0
        return c
