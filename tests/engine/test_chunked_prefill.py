"""Chunked prefill: a long prompt arriving while others decode runs a chunk per step, the others
keep getting a token every step, and its output is what it would have been unchunked."""

from __future__ import annotations

import math

import torch

from switchyard.engine.scheduler import Engine
from tests.engine.conftest import Collector, completion, results, submit, text_of

LONG = ("The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit. ") * 3


def engine(loaded, chunk: int) -> Engine:
    col = Collector()
    eng = Engine(loaded.model, loaded.tokenizer, col, max_batch=8, prefill_chunk=chunk)
    eng.collector = col
    return eng


def greedy(prompt: str, n: int):
    return completion(prompt, temperature=0, max_tokens=n, ignore_eos=True, cache_prompt=False)


def test_long_prompt_interleaves_with_decodes_and_keeps_its_output(tiny_loaded, tiny_hf):
    model, tok = tiny_hf, tiny_loaded.tokenizer
    ids = tok.encode(LONG)
    chunk = 16
    assert len(ids) > 4 * chunk
    eng = engine(tiny_loaded, chunk)
    streams = [submit(eng, greedy(p, 80)) for p in ("Hello world", "red green", "def add(a, b):")]
    eng.step()  # the three short prompts prefill together
    assert len(eng.active) == 3
    long_rid = submit(eng, greedy(LONG, 12))
    steps_filling = 0
    made = {r: 0 for r in streams}
    while True:
        before = {r: sum(len(s.row.output_ids) for s in eng.jobs[r].seqs) for r in streams}
        eng.step()
        after = {r: sum(len(s.row.output_ids) for s in eng.jobs[r].seqs) for r in streams}
        for r in streams:  # every decoding stream advanced by exactly one token in this step
            assert after[r] == before[r] + 1
            made[r] += 1
        if eng.filling is None:
            break
        steps_filling += 1
        assert eng.filling.slot == len(eng.active) == 3  # nothing waits: it fills where it will decode
    long_seq = eng.jobs[long_rid].seqs[0]
    assert long_seq.chunks == math.ceil(len(ids) / chunk)  # one chunk per step, none bigger
    assert steps_filling == long_seq.chunks - 1
    while eng.busy:
        eng.step()
    chunked = text_of(results(eng, long_rid))
    # the same prompt alone, unchunked, and model.generate() agree with it token for token
    alone = engine(tiny_loaded, 4096)
    alone_rid = submit(alone, greedy(LONG, 12))
    alone.step()
    assert alone.filling is None  # nothing else decoding: the whole prompt in one forward
    while alone.busy:
        alone.step()
    assert text_of(results(alone, alone_rid)) == chunked
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), max_new_tokens=12, min_new_tokens=12, do_sample=False,
                             pad_token_id=tok.pad_token_id)
    assert chunked == tok.decode(out[0, len(ids):], skip_special_tokens=True)
    for r in streams:
        assert len(text_of(results(eng, r))) > 0


def test_cancelled_long_prompt_frees_its_slot(tiny_loaded):
    eng = engine(tiny_loaded, 8)
    stream = submit(eng, greedy("Hello world", 30))
    eng.step()
    rid = submit(eng, greedy(LONG, 5))
    eng.step()
    assert eng.filling is not None
    eng.cancel(rid)
    eng.step()
    assert eng.filling is None
    while eng.busy:
        eng.step()
    assert len(text_of(results(eng, stream))) > 0


def test_short_prompts_join_while_a_long_one_fills(tiny_loaded):
    """A long prompt runs in chunks from a slot of its own; short requests arriving meanwhile are
    admitted and decode beside it (no waiting behind it), and every output is what it is alone."""
    eng = engine(tiny_loaded, 16)
    first = submit(eng, greedy("Hello world", 40))
    eng.step()
    long_rid = submit(eng, greedy(LONG, 6))
    eng.step()
    assert eng.filling is not None and eng.filling.slot == len(eng.active) == 1
    shorts = [submit(eng, greedy(p, 6)) for p in ("red green", "def add(a, b):")]
    eng.step()  # both admitted while the long one still fills, from the last slot now
    assert eng.filling is not None and eng.filling.slot == eng.slots - 1 and len(eng.active) == 3
    while eng.filling is not None:
        eng.step()
    while eng.busy:
        eng.step()
    together = {r: text_of(results(eng, r)) for r in (first, long_rid, *shorts)}
    alone = engine(tiny_loaded, 4096)
    for rid, prompt, n in ((first, "Hello world", 40), (long_rid, LONG, 6), (shorts[0], "red green", 6),
                           (shorts[1], "def add(a, b):", 6)):
        r = submit(alone, greedy(prompt, n))
        while alone.busy:
            alone.step()
        assert text_of(results(alone, r)) == together[rid], prompt


def test_a_burst_of_short_prompts_joins_in_one_step(tiny_loaded):
    """While one sequence decodes, prompts that each fit a chunk are admitted together in the
    next step (more tokens in all than a chunk), not a chunk's worth a step; a prompt longer
    than a chunk still runs in chunks."""
    tok = tiny_loaded.tokenizer
    prompts = ["red green", "def add(a, b):", "blue sky", "one two three", "cats and dogs"]
    lengths = [len(tok.encode(p)) for p in prompts]
    chunk = max(lengths)
    assert sum(lengths) > 2 * chunk
    eng = engine(tiny_loaded, chunk)
    submit(eng, greedy("Hello world", 40))
    eng.step()
    for p in prompts:
        submit(eng, greedy(p, 4))
    eng.step()
    assert len(eng.active) == 1 + len(prompts) and not eng.waiting and eng.filling is None
    submit(eng, greedy(LONG, 2))
    eng.step()
    assert eng.filling is not None and eng.filling.chunks == 1


def test_a_long_prompt_alone_fills_in_chunks_with_its_output(tiny_loaded, monkeypatch):
    """Nothing decodes: the prompt still runs a chunk a step (IDLE_CHUNK, made small here), no
    row is sampled until its last chunk, and its output is the unchunked one."""
    from switchyard.engine import scheduler

    eng = engine(tiny_loaded, 4096)
    rid = submit(eng, greedy(LONG, 6))
    while eng.busy:
        eng.step()
    whole = text_of(results(eng, rid))
    monkeypatch.setattr(scheduler, "IDLE_CHUNK", 8)
    eng = engine(tiny_loaded, 8)
    rid = submit(eng, greedy(LONG, 6))
    eng.step()
    assert eng.filling is not None and not eng.active
    while eng.busy:
        eng.step()
    assert eng.jobs.get(rid) is None and text_of(results(eng, rid)) == whole


def test_prompts_up_to_four_chunks_join_whole_beside_decodes(tiny_loaded):
    tok = tiny_loaded.tokenizer
    mid = "red green blue yellow orange purple"
    chunk = len(tok.encode(mid)) // 2
    assert chunk < len(tok.encode(mid)) <= 4 * chunk < len(tok.encode(LONG))
    eng = engine(tiny_loaded, chunk)
    submit(eng, greedy("Hello world", 20))
    eng.step()
    submit(eng, greedy(mid, 3))
    eng.step()
    assert eng.filling is None and len(eng.active) == 2
    submit(eng, greedy(LONG, 3))
    eng.step()
    assert eng.filling is not None


def test_prompts_sharing_a_cached_prefix_run_in_one_forward(tiny_loaded):
    """Prompts sharing a prefix (a system prompt) that a slot already holds copy it from there
    and run together; only a prefix longer than the cache's makes one wait for another."""
    eng = engine(tiny_loaded, 16)
    system = "You are a helpful assistant. Answer briefly. "
    submit(eng, completion(system + "Hi", temperature=0, max_tokens=20, ignore_eos=True))
    eng.step()
    forwards = []
    run = eng.runner.run
    eng.runner.run = lambda groups: forwards.append(len(groups)) or run(groups)
    for q in ("red", "green", "blue"):
        submit(eng, completion(system + q, temperature=0, max_tokens=2))
    eng.step()
    assert len(eng.active) == 4 and len(forwards) == 1  # decode and the three prompts together
    cached = [s.job.cached[0] for s in eng.active[1:]]
    assert min(cached) >= len(tiny_loaded.tokenizer.encode(system)) - 1


def test_a_second_long_prompt_waits_for_the_first(tiny_loaded):
    eng = engine(tiny_loaded, 8)
    submit(eng, greedy("Hello world", 60))
    eng.step()
    a, b = submit(eng, greedy(LONG, 3)), submit(eng, greedy("red green blue yes no maybe. " * 6, 3))
    eng.step()
    assert eng.filling is not None and eng.filling.job.rid == a and len(eng.waiting) == 1
    while eng.filling is not None and eng.filling.job.rid == a:
        eng.step()
    while eng.busy:
        eng.step()
    assert text_of(results(eng, a)) and text_of(results(eng, b))


def test_default_chunk_by_dtype(tiny_loaded):
    import torch

    from switchyard.engine.scheduler import default_prefill_chunk

    assert default_prefill_chunk(torch.device("cpu"), torch.float32) == 16
    assert default_prefill_chunk(torch.device("cpu"), torch.bfloat16) == 32
    assert default_prefill_chunk(torch.device("cuda"), torch.float32) == 32
    assert Engine(tiny_loaded.model, tiny_loaded.tokenizer, Collector()).prefill_chunk == 16  # fp32 fixture
    assert engine(tiny_loaded, 24).prefill_chunk == 24
