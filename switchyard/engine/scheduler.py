"""The engine: admits requests, runs one batched forward per step for every active sequence
(continuous batching: new sequences join between steps, finished ones leave), samples, and
emits chunks. Runs single-threaded inside the engine process; ``emit`` sends to the gateway."""

from __future__ import annotations

import math
from collections import deque
from typing import Any, cast

import torch

from switchyard.core.canonical import CanonicalRequest, Chunk
from switchyard.core.errors import GatewayError
from switchyard.dialects.defaults import sampling_defaults
from switchyard.engine import logprobs as lp
from switchyard.engine.constraints import Constraints
from switchyard.engine.jobs import JobBuilder
from switchyard.engine.kvcache import common_prefix
from switchyard.engine.prompts import build_prompts
from switchyard.engine.runner import Pass, Runner
from switchyard.engine.sampling.pipeline import Pipeline
from switchyard.engine.sequence import Emit, Job, Seq
from switchyard.engine.weights import Model

# Prompt tokens a step: a chunk when nothing decodes, and short prompts admitted whole at any
# time (bounds a step's activations and attention's scratch memory).
IDLE_CHUNK = 512
# While others decode, a prompt running more than this many chunks' tokens fills a chunk a step;
# shorter ones join whole. Beside 16 float32 streams on the AVX2 EPYC, one forward with a 64-token
# prompt took 2.3x a plain decode step, 128 tokens 3.5x.
LONG_CHUNKS = 4


def default_prefill_chunk(device: torch.device, dtype: torch.dtype) -> int:
    """Prompt tokens a step runs beside decoding sequences. On CPU, float32 products cost in
    proportion to their rows (bfloat16 ones, memory bound, far less), so a float32 step with a
    32-token chunk beside 16 streams took up to 3.5x their normal gap, 16 tokens 2.3x (measured,
    docs/engine.md); bfloat16 stays under 2.6x with 32 and reaches a long prompt's first token
    twice as soon."""
    return 16 if device.type == "cpu" and dtype == torch.float32 else 32


class Engine:
    def __init__(self, model: Model, tokenizer: Any, emit: Emit, max_batch: int = 16,
                 context_window: int | None = None, prefill_chunk: int | None = None,
                 cuda_graphs: bool = True, attention: str = "auto", prompt_cache_mib: int = 256) -> None:
        spec = model.spec
        self.tokenizer = tokenizer
        self.emit = emit
        limit = spec.max_position_embeddings
        self.context_window = min(context_window or limit, limit)
        self.vocab_size = spec.vocab_size
        self.runner = Runner(model, slots=max_batch, max_len=self.context_window,
                             kv_dtype=model.weights.dtype, cuda_graphs=cuda_graphs, attention=attention)
        self.slots = max_batch
        eos_ids = list(spec.eos_ids)
        if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos_ids:
            eos_ids.append(tokenizer.eos_token_id)
        self.eos = eos_ids
        self.eos_t = torch.tensor(eos_ids, dtype=torch.long)
        self.constraints = Constraints(tokenizer, self.vocab_size, eos_ids)
        self.table = lp.TokenTable(lambda: self.constraints.ll_tokenizer)
        self.pipeline = Pipeline()
        self.builder = JobBuilder(tokenizer, max_batch, self.vocab_size, self.context_window,
                                  self.constraints, self.pipeline)
        self.jobs: dict[int, Job] = {}
        self.waiting: deque[Seq] = deque()
        self.active: list[Seq] = []  # active[i].slot == i
        # A long prompt, partly in the cache at slot len(active).
        self.filling: Seq | None = None
        self.prefill_chunk = prefill_chunk or default_prefill_chunk(model.weights.device, model.weights.dtype)
        # positions free slots may keep for prompt caching; beyond them the least recently used go
        self.cache_budget = self.runner.cache.positions_in(prompt_cache_mib << 20)
        # Greedy and seeded sequences get batch-invariant steps (runner.invariant) on CPU, where
        # the kernels' invariance is measured and tested; not on CUDA (not run on a GPU here).
        self.exact_steps = model.weights.device.type == "cpu"
        self.steps = 0

    # -- requests ---------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.active or self.filling)

    def count_tokens(self, req: CanonicalRequest) -> int:
        return sum(len(p.ids) for p in build_prompts(self.tokenizer, req, self.vocab_size))

    def submit(self, rid: int, req: CanonicalRequest) -> None:
        try:
            job = self.builder.build(rid, req)
        except GatewayError as e:
            self.emit(("error", rid, type(e).__name__, e.message, e.param))
            return
        self.jobs[rid] = job
        self.waiting.extend(job.seqs)

    def cancel(self, rid: int) -> None:
        job = self.jobs.pop(rid, None)
        if job is None:
            return
        job.cancelled = True
        self.waiting = deque(s for s in self.waiting if s.job is not job)

    # -- stepping ---------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> None:
        """One forward pass: decode every active sequence, admit waiting ones, sample, emit."""
        self.steps += 1
        self._release()
        held = (*self.active, *self.waiting, *([self.filling] if self.filling else ()))
        self.runner.invariant = self.exact_steps and any(_deterministic(s) for s in held)
        rows: list[Seq] = []
        step = Pass(self.runner)  # decode rows, admitted prompts and a chunk: one forward
        if self.active:
            # Every active row has its last sampled token pending.
            step.add(self.runner.plan_decode(cast("list[int]", [s.pending for s in self.active])))
            rows.extend(self.active)
        # A long prompt runs ``chunk`` tokens a step while others decode (chunked prefill keeps
        # their inter-token gap), more when nothing waits on it. Shorter prompts join whole, up
        # to IDLE_CHUNK tokens a step: a burst of short requests starts together (admitted a
        # chunk's worth a step, 32 took 15 steps to start: 159 -> 183 tok/s).
        if self.active:
            chunk, long = self.prefill_chunk, LONG_CHUNKS * self.prefill_chunk
        else:
            chunk = long = max(self.prefill_chunk, IDLE_CHUNK)
        budget = max(chunk, IDLE_CHUNK)
        filled = False
        # Admitted prompts run in the step's forward, except that a prompt sharing a longer
        # prefix with a pending one than the cache holds waits for it to run (then copies the
        # prefix), and echo with logprobs runs alone. A long prompt runs in chunks, one a step,
        # from a slot of its own at the end (one at a time); shorter prompts keep joining.
        batch: list[tuple[int, list[int], list[int]]] = []
        planned: list[list[int]] = []  # prompts pending in ``step``
        while self.waiting and budget > 0 and len(self.active) + (self.filling is not None) < self.slots:
            if self.filling is not None and len(self.waiting[0].prompt.ids) > min(long, budget):
                break  # it would need chunks too: it waits for the filling one (FIFO)
            if self.filling is not None and self.filling.slot == len(self.active):
                step.flush()  # its chunk may be pending at the slot it leaves
                planned = []  # run: later admissions find their prefixes in the cache
                self._park(self.filling)  # out of the way of this admission
            seq = self.waiting.popleft()
            prefix = self._prefix(seq)
            if self._waits_for_pending(seq, prefix, [*planned, *(b[2] for b in batch)]):
                self._prefill(batch, step)
                step.flush()
                batch, planned = [], []
                prefix = self._prefix(seq)  # the pending prompts are in the cache now
            run = self._admit(seq, prefix)
            if isinstance(run, list) and len(run) > min(long, budget):
                planned += self._prefill(batch, step)
                batch = []
                self.active.pop()  # it fills at slot len(active) until an admission needs that
                seq.rest, self.filling = run, seq
                budget -= self._fill(min(chunk, budget), rows, step)
                filled = True
                continue
            if isinstance(run, list):
                batch.append((seq.slot, run, seq.prompt.ids))
                budget -= len(run)
            else:
                planned += self._prefill(batch, step)
                batch = []
                step.add_logits(run.view(1, -1))
            rows.append(seq)
        self._prefill(batch, step)
        if self.filling is not None and not filled:  # admissions do not starve it
            self._fill(max(min(chunk, budget), self.prefill_chunk // 2, 1), rows, step)
        step.flush()  # a chunk runs even when no row is sampled (a long prompt filling alone)
        if rows:
            self._sample(rows, step.logits())
        self._release()

    def _park(self, seq: Seq) -> None:
        """Move the sequence whose prompt runs in chunks to the last slot, out of the way of the
        slots ``len(active)..`` that admissions take meanwhile (a copy of what it has filled, and
        another when it joins: so only when something is admitted beside it)."""
        cache, last = self.runner.cache, self.slots - 1
        cache.ensure(0, self.slots)
        cache.swap(seq.slot, last)
        seq.slot = last

    def _fill(self, most: int, rows: list[Seq], step: Pass) -> int:
        """Plan the next chunk (up to ``most`` tokens) of the filling prompt; with its last chunk
        the sequence joins the active ones (its logits are sampled with this step's). Returns
        the tokens planned."""
        seq = self.filling
        assert seq is not None
        n = min(most, len(seq.rest))
        if n <= 0:
            return 0
        chunk, seq.rest = seq.rest[:n], seq.rest[n:]
        seq.chunks += 1
        done = not seq.rest
        if done:
            self.filling = None
            # parked, or sequences left: active ones are 0..B-1. Nothing pending writes to either
            # slot (admissions this step took lower ones), and its earlier chunks have run.
            if seq.slot != len(self.active):
                self.runner.cache.swap(seq.slot, len(self.active))
                seq.slot = len(self.active)
            self.active.append(seq)
            rows.append(seq)
        step.add(self.runner.plan_prefill(seq.slot, [chunk]), keep=done)
        return n

    def _prefill(self, batch: list[tuple[int, list[int], list[int]]], step: Pass) -> list[list[int]]:
        """Plan the admitted prompts' rows; returns their prompts."""
        if batch:
            step.add(self.runner.plan_prefill(batch[0][0], [b[1] for b in batch]))
        return [b[2] for b in batch]

    def _admit(self, seq: Seq, prefix: tuple[int | None, int] | None) -> torch.Tensor | list[int]:
        """Take a slot and reuse the cached prefix (``_prefix``); returns the prompt tokens still to
        run, or (echo with logprobs) runs them and returns the last position's logits."""
        job, cache = seq.job, self.runner.cache
        slot = len(self.active)
        seq.slot = slot
        self.active.append(seq)
        cache.ensure(0, slot + 1)
        ids = seq.prompt.ids
        echo_lp = _echo_logprobs(job.req)
        src, reuse = prefix or (None, 0)
        reuse = min(reuse, len(ids) - 1)  # at least one token must run to get logits
        if reuse <= 0:
            src, reuse = None, 0
        if src is None or src < slot:  # this slot's cached prompt would be overwritten
            self._set_aside(slot)
        if src is not None and src > slot:
            cache.swap(src, slot)
        elif src is not None and src < slot:
            cache.copy_prefix(src, slot, reuse)
        cache.truncate(slot, reuse)
        if seq.choice == 0:
            job.cached[seq.prompt_index] = reuse
        if not echo_lp:
            return ids[reuse:]  # run by the caller, batched with the other admissions
        logits = self.runner.prefill(slot, ids[reuse:], all_logits=True)
        if seq.choice == 0:
            assert job.req.logprobs is not None  # echo_lp
            job.prompt_logprobs[seq.prompt_index] = lp.prompt_logprobs(
                self.table, logits, ids, job.req.logprobs)
        return logits[-1]

    def _prefix(self, seq: Seq) -> tuple[int | None, int] | None:
        """The slot holding the longest cached prefix of the sequence's prompt, and its length;
        None when the prompt may not start from one (``cache_prompt`` off; echo with logprobs
        needs every position's logits). Never the filling sequence's slot (taking a prefix from
        it would move its cache away)."""
        req = seq.job.req
        use = req.cache_prompt
        if use is None:
            use = bool(sampling_defaults(req.dialect).get("cache_prompt", True))
        if not use or _echo_logprobs(req):
            return None
        parked, cache = self._filling_slot(), self.runner.cache
        # a greedy or seeded prompt starts only from a prefix an invariant step computed
        exact = self.exact_steps and _deterministic(seq)
        return cache.best_prefix(seq.prompt.ids, [s for s in range(self.slots)
                                                  if s != parked and (cache.exact[s] or not exact)])

    def _waits_for_pending(self, seq: Seq, prefix: tuple[int | None, int] | None,
                           pending: list[list[int]]) -> bool:
        """Whether a prompt pending in this step's forward would give ``seq`` a longer prefix
        than the cache holds now (``prefix``; then it runs first, and ``seq`` copies the prefix)."""
        if not pending or prefix is None:
            return False
        longest = max(common_prefix(p, seq.prompt.ids) for p in pending)
        return longest > 1 and longest > prefix[1]

    def _set_aside(self, slot: int) -> None:
        """Move the prompt cached in free ``slot`` to an empty free slot, if one is allocated, so
        a new sequence taking ``slot`` does not forget it (the budget decides what is forgotten)."""
        cache = self.runner.cache
        if cache.tokens[slot]:
            empty = next((e for e in self._free_slots() if e > slot and e < cache.rows
                          and not cache.tokens[e]), None)
            if empty is not None:
                cache.swap(slot, empty)

    def _sample(self, rows: list[Seq], logits: torch.Tensor) -> None:
        want = [i for i, s in enumerate(rows) if s.job.want_logprobs]
        constrained = [i for i, s in enumerate(rows) if s.matcher is not None]
        # Off CPU, an all-greedy batch takes its argmax where the logits are (one small copy
        # back); anything else (processors, constraints, logprobs) runs on CPU.
        states = [s.row for s in rows]
        if logits.device.type != "cpu" and (want or constrained or not self.pipeline.plain(states)):
            logits = logits.cpu()
        raw = logits[want].log_softmax(dim=1) if want else None
        self.constraints.apply(logits, constrained, [rows[i].matcher for i in constrained])
        no_eos = [i for i, s in enumerate(rows) if s.row.params.ignore_eos and s.matcher is None]
        if no_eos and len(self.eos):
            dev = logits.device
            logits[torch.tensor(no_eos, device=dev).view(-1, 1), self.eos_t.to(dev).view(1, -1)] = -math.inf
        tokens = self.pipeline.sample(logits, states)
        raw_of = dict(zip(want, range(len(want)), strict=True))
        for i, s in enumerate(rows):
            logp = raw[raw_of[i]] if raw is not None and i in raw_of else None
            self._advance(s, tokens[i], logp)

    def _advance(self, s: Seq, tok: int, logp: torch.Tensor | None) -> None:
        job = s.job
        if job.cancelled:
            s.finish = "stop"
            return
        if s.max_tokens == 0:  # scoring (echo, max_tokens 0): the prompt ran, nothing is generated
            s.finish = "length"
            self._finished(s)
            return
        s.row.output_ids.append(tok)
        s.tokens += 1
        if logp is not None:
            s.cum_logprob += float(logp[tok])
            if job.req.logprobs is not None:
                s.logprobs.append(lp.build(self.table, logp, tok, job.req.logprobs))
        if s.matcher is not None and not s.matcher.consume_token(tok):
            s.finish = "error"
        elif tok in self.eos and not (s.row.params.ignore_eos and s.matcher is None):
            s.finish = "stop"
        else:
            text = s.stops.feed(s.detok.add(tok))
            stop = s.stops.word
            s.text += text
            if stop is not None:
                s.finish, s.stop_word = "stop", stop
            elif s.matcher is not None and s.matcher.is_stopped():
                s.finish = "stop"
            elif (len(s.row.output_ids) >= s.max_tokens
                  or len(s.prompt.ids) + len(s.row.output_ids) >= self.context_window):
                s.finish = "length"
        if s.finish is not None and s.stop_word is None:
            s.text += s.stops.flush()
        s.pending = tok
        if s.finish is not None:
            self._finished(s)
        elif job.req.stream and not job.buffered and (s.text or (not s.started and job.req.kind == "chat")):
            self.emit(("chunk", job.rid, s.chunk(self._index(s))))

    def _index(self, s: Seq) -> int:
        return s.prompt_index * s.job.n + s.choice

    def _finished(self, s: Seq) -> None:
        job = s.job
        if not job.done:
            if not job.buffered:
                self.emit(("chunk", job.rid, s.chunk(self._index(s))))
            return
        self.jobs.pop(job.rid, None)
        chunks = self._best(job) if job.buffered else [s.chunk(self._index(s))]
        chunks[-1].usage = job.usage()
        for c in chunks:
            self.emit(("chunk", job.rid, c))
        self.emit(("done", job.rid))

    def _best(self, job: Job) -> list[Chunk]:
        """The n candidates per prompt with the best mean token logprob, renumbered."""
        out = []
        for pi in range(len(job.prompts)):
            cands = [s for s in job.seqs if s.prompt_index == pi]
            cands.sort(key=lambda s: s.cum_logprob / max(1, len(s.row.output_ids)), reverse=True)
            for rank, s in enumerate(cands[: job.n]):
                out.append(s.chunk(pi * job.n + rank))
        return out

    def _release(self) -> None:
        """Drop finished and cancelled sequences, keeping the active ones in slots 0..B-1."""
        cache = self.runner.cache
        for slot in range(len(self.active) - 1, -1, -1):
            s = self.active[slot]
            if s.finish is None and not s.job.cancelled:
                continue
            if s.finish is None:
                s.finish = "stop"
            last = len(self.active) - 1
            if slot != last:
                cache.swap(slot, last)  # the leaving sequence's cache stays warm in a free slot
                self.active[slot] = self.active[last]
                self.active[slot].slot = slot
            self.active.pop()
            cache.used_at[last] = self.steps
        f = self.filling
        if f is not None and f.job.cancelled:
            f.finish, self.filling = "stop", None
            cache.used_at[f.slot] = self.steps
        self._evict()

    def _filling_slot(self) -> int:
        """The slot of the sequence whose prompt runs in chunks (-1: none)."""
        return self.filling.slot if self.filling is not None else -1

    def _free_slots(self) -> list[int]:
        """Slots no sequence occupies (the active ones are 0..B-1; a filling one has its own)."""
        busy = self._filling_slot()
        return [s for s in range(len(self.active), self.slots) if s != busy]

    def _evict(self) -> None:
        """Keep the free slots' cached prompts within the budget, least recently used out first."""
        cache = self.runner.cache
        free = [s for s in self._free_slots() if cache.tokens[s]]
        held = sum(len(cache.tokens[s]) for s in free)
        for s in sorted(free, key=cache.used_at.__getitem__):
            if held <= self.cache_budget:
                break
            held -= len(cache.tokens[s])
            cache.release(s)


def _deterministic(seq: Seq) -> bool:
    """Greedy or seeded: its tokens must not depend on its batch or the prompt cache."""
    p = seq.row.params
    return p.greedy or p.seed is not None


def _echo_logprobs(req: CanonicalRequest) -> bool:
    """Echo with logprobs (completions): every prompt position's logits are returned."""
    return bool(req.echo) and req.logprobs is not None and req.kind != "chat"
