"""The scheduler in-process on the tiny model: batching, prompts, outputs, limits."""

from __future__ import annotations

import pytest
import torch

from switchyard.core.canonical import UNLIMITED, CanonicalRequest
from switchyard.core.errors import InvalidRequest
from switchyard.engine.runner import Runner
from tests.engine.conftest import completion, results, run, submit, text_of


def test_runner_matches_transformers_forward(tiny_loaded, tiny_hf):
    model, tok = tiny_hf, tiny_loaded.tokenizer
    ids = tok.encode("The quick brown fox jumps over")
    r = Runner(tiny_loaded.model, slots=2, max_len=64, kv_dtype=torch.float32)
    r.prefill(1, ids[:3])
    got = r.prefill(1, ids[3:], all_logits=True)
    with torch.inference_mode():
        ref = model(torch.tensor([ids])).logits[0, 3:]
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    # a decode step on a batch of two equals the full forward on each sequence
    r.prefill(0, ids[:4])
    step = r.decode([ids[4], 7])
    with torch.inference_mode():
        ref0 = model(torch.tensor([ids[:5]])).logits[0, -1]
        ref1 = model(torch.tensor([[*ids, 7]])).logits[0, -1]
    torch.testing.assert_close(step[0], ref0, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(step[1], ref1, atol=1e-4, rtol=1e-4)


def test_greedy_concurrent_equals_alone(tiny_engine):
    prompts = ["Hello world", "The rain in Spain", "def add(a, b):", "red green", "Lorem ipsum dolor"]
    alone = [text_of(run(tiny_engine, completion(p, temperature=0, max_tokens=24))) for p in prompts]
    rids = [submit(tiny_engine, completion(p, temperature=0, max_tokens=24 - i))
            for i, p in enumerate(prompts)]
    while tiny_engine.busy:
        tiny_engine.step()
    together = [text_of(results(tiny_engine, rid)) for rid in rids]
    # Shorter max_tokens for later requests: sequences leave at different steps.
    for a, t in zip(alone, together, strict=True):
        assert a.startswith(t) and len(t) > 0


def test_seed_gives_identical_output(tiny_engine):
    req = completion("Hello", temperature=1.0, seed=1234, max_tokens=20)
    a = text_of(run(tiny_engine, req))
    b = text_of(run(tiny_engine, req))
    c = text_of(run(tiny_engine, completion("Hello", temperature=1.0, seed=99, max_tokens=20)))
    assert a == b
    assert a != c


def test_usage_and_tokens_per_chunk(tiny_engine):
    chunks = run(tiny_engine, completion("Hello world", max_tokens=7, temperature=0, stream=True))
    assert chunks[-1].finish_reason == "length"
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 7
    assert sum(c.tokens or 0 for c in chunks) == 7
    assert all(c.usage is None for c in chunks[:-1])


def test_prompt_forms_and_cached_tokens(tiny_engine):
    tok = tiny_engine.tokenizer
    ids = tok.encode("The quick brown fox jumps over the lazy dog")
    first = run(tiny_engine, completion(ids, temperature=0, max_tokens=3))
    again = run(tiny_engine, completion([[*ids[:4], tok.decode(ids[4:])]], temperature=0, max_tokens=3))
    assert first[-1].usage.prompt_tokens == len(ids)
    assert text_of(first) == text_of(again)
    assert again[-1].usage.cached_tokens >= len(ids) - 1
    off = run(tiny_engine, completion(ids, temperature=0, max_tokens=3, cache_prompt=False))
    assert off[-1].usage.cached_tokens == 0 and text_of(off) == text_of(first)


def test_multi_prompt_n_indices_and_usage(tiny_engine):
    chunks = run(tiny_engine, completion(["Hello", "red green"], n=2, max_tokens=4, temperature=1, seed=5))
    assert sorted({c.index for c in chunks}) == [0, 1, 2, 3]
    usage = chunks[-1].usage
    p = len(tiny_engine.tokenizer.encode("Hello")) + len(tiny_engine.tokenizer.encode("red green"))
    assert usage.prompt_tokens == p  # each prompt counted once, not per choice
    assert usage.completion_tokens == 16


def test_best_of_returns_n_best_and_rejects_streaming(tiny_engine):
    chunks = run(tiny_engine, completion("Hello", n=1, best_of=3, max_tokens=5, temperature=1, seed=3))
    assert [c.index for c in chunks] == [0]
    assert chunks[-1].usage.completion_tokens == 15  # every candidate was generated
    with pytest.raises(InvalidRequest) as e:
        run(tiny_engine, completion("Hello", n=1, best_of=2, stream=True))
    assert e.value.param == "best_of"


def test_logprobs_shapes(tiny_engine):
    chunks = run(tiny_engine, completion("Hello", max_tokens=6, temperature=0, logprobs=3, stream=True))
    lps = [lp for c in chunks for lp in (c.logprobs or [])]
    assert len(lps) == 6
    for lp in lps:
        assert len(lp.top) == 3 and lp.logprob <= 0
        assert lp.logprob == pytest.approx(lp.top[0].logprob)  # greedy picks the top token
        assert lp.bytes and lp.top[0].logprob >= lp.top[1].logprob >= lp.top[2].logprob
    none = run(tiny_engine, completion("Hello", max_tokens=2, temperature=0))
    assert none[-1].logprobs is None


def test_echo_puts_prompt_first_with_prompt_logprobs(tiny_engine):
    chunks = run(tiny_engine, completion("Hello world", echo=True, logprobs=1, max_tokens=3, temperature=0))
    n = len(tiny_engine.tokenizer.encode("Hello world"))
    assert chunks[0].text.startswith("Hello world")
    assert len(chunks[0].prompt_logprobs) == n
    assert all(len(lp.top) == 1 for lp in chunks[0].prompt_logprobs[1:])


def test_chat_first_chunk_has_role(tiny_engine):
    req = CanonicalRequest(kind="chat", model="local/tiny", dialect="openai", stream=True,
                           messages=[{"role": "user", "content": "hi"}], max_tokens=4, temperature=0)
    chunks = run(tiny_engine, req)
    assert chunks[0].role == "assistant"
    assert all(c.role is None for c in chunks[1:])


def test_chat_defaults_to_rest_of_context(tiny_engine):
    req = CanonicalRequest(kind="chat", model="local/tiny", dialect="openai", ignore_eos=True,
                           messages=[{"role": "user", "content": "hi"}], temperature=0)
    chunks = run(tiny_engine, req)
    u = chunks[-1].usage
    assert chunks[-1].finish_reason == "length"
    assert u.prompt_tokens + u.completion_tokens == tiny_engine.context_window


def test_unlimited_max_tokens_fills_context(tiny_engine):
    chunks = run(tiny_engine, completion("Hello", max_tokens=UNLIMITED, ignore_eos=True, temperature=0))
    u = chunks[-1].usage
    assert u.prompt_tokens + u.completion_tokens == tiny_engine.context_window


def test_overflow_policies(tiny_engine):
    long = [5] * 250  # context is 256
    with pytest.raises(InvalidRequest) as e:
        run(tiny_engine, completion(long, max_tokens=10))
    assert "maximum context length is 256 tokens" in e.value.message
    assert "260 tokens (250 in the messages, 10 in the completion)" in e.value.message
    short = run(tiny_engine, completion(long, max_tokens=10, overflow="truncate_max_tokens", ignore_eos=True))
    assert short[-1].usage.completion_tokens == 6
    cut = run(tiny_engine, completion(long, max_tokens=10, overflow="truncate_prompt", ignore_eos=True))
    assert cut[-1].usage.prompt_tokens == 246 and cut[-1].usage.completion_tokens == 10
    fw = run(tiny_engine, completion(long, max_tokens=10, dialect="fireworks", ignore_eos=True))
    assert fw[-1].usage.completion_tokens == 6  # Fireworks' default: truncate max_tokens


def test_stop_sequence_removed_and_reported(tiny_engine):
    base = text_of(run(tiny_engine, completion("Hello world", temperature=0, max_tokens=20)))
    stop = base[5:8]
    chunks = run(tiny_engine, completion("Hello world", temperature=0, max_tokens=20, stop=[stop],
                                         stream=True))
    assert text_of(chunks) == base[: base.index(stop)]
    assert chunks[-1].finish_reason == "stop" and chunks[-1].stop_word == stop
    inc = run(tiny_engine, completion("Hello world", temperature=0, max_tokens=20, stop=[stop],
                                      include_stop_str_in_output=True))
    assert text_of(inc) == base[: base.index(stop) + len(stop)]


def test_eos_and_ignore_eos(tiny_engine):
    eos = tiny_engine.eos[0]
    forced = run(tiny_engine, completion("Hello", max_tokens=5, logit_bias={eos: 100}, temperature=0))
    assert forced[-1].finish_reason == "stop" and forced[-1].usage.completion_tokens == 1
    ignored = run(tiny_engine, completion("Hello", max_tokens=5, logit_bias={eos: 100}, temperature=0,
                                          ignore_eos=True))
    assert ignored[-1].finish_reason == "length" and ignored[-1].usage.completion_tokens == 5


def test_fim_suffix(tiny_engine, tiny_loaded):
    chunks = run(tiny_engine, completion("def add(a, b):", suffix="\n", max_tokens=3, temperature=0))
    vocab = tiny_engine.tokenizer.get_vocab()
    assert chunks[-1].usage.prompt_tokens == len(tiny_engine.tokenizer.encode("def add(a, b):")) + 4
    assert "<fim_middle>" in vocab


def test_bad_values_are_invalid_requests(tiny_engine):
    for kw, param in [({"temperature": -1}, "temperature"), ({"top_p": 2}, "top_p"), ({"n": 0}, "n"),
                      ({"logprobs": 50}, "logprobs"), ({"max_tokens": -2}, "max_tokens"),
                      ({"logit_bias": {10**6: 1}}, "logit_bias")]:
        with pytest.raises(InvalidRequest) as e:
            run(tiny_engine, completion("Hello", **kw))
        assert e.value.param == param
    with pytest.raises(InvalidRequest) as e:
        run(tiny_engine, completion([10**6]))
    assert e.value.param == "prompt"


def test_cancel_frees_the_sequence_within_a_step(tiny_engine):
    rid = submit(tiny_engine, completion("Hello", max_tokens=200, ignore_eos=True, stream=True))
    other = submit(tiny_engine, completion("red", max_tokens=200, ignore_eos=True, stream=True))
    for _ in range(3):
        tiny_engine.step()
    assert len(tiny_engine.active) == 2
    tiny_engine.cancel(rid)
    tiny_engine.step()
    assert [s.job.rid for s in tiny_engine.active] == [other]
    tiny_engine.cancel(other)
    tiny_engine.step()
    assert not tiny_engine.busy
    tiny_engine.collector.msgs.clear()


def test_more_requests_than_slots_queue(tiny_engine):
    rids = [submit(tiny_engine, completion("Hello", max_tokens=3, temperature=0)) for _ in range(12)]
    while tiny_engine.busy:
        assert len(tiny_engine.active) <= tiny_engine.slots
        tiny_engine.step()
    texts = {text_of(results(tiny_engine, r)) for r in rids}
    assert len(texts) == 1


def test_decode_rows_of_different_lengths_split_in_two_groups(tiny_loaded, tiny_hf, monkeypatch):
    """Rows far apart in length attend in two groups, each over its own longest row: the cut
    is where the fewest row-positions are attended, and the logits are transformers'."""
    from switchyard.engine import runner

    assert runner._split([10, 12, 9, 2000]) == 3
    assert runner._split([2000, 10, 12]) == 1
    assert runner._split([10, 12, 9, 30]) == 0  # too little to save
    monkeypatch.setattr(runner, "SPLIT_SAVING", 1)
    model, tok = tiny_hf, tiny_loaded.tokenizer
    short, long = tok.encode("red green"), tok.encode("The quick brown fox jumps over the lazy dog")
    r = Runner(tiny_loaded.model, slots=3, max_len=64, kv_dtype=torch.float32)
    for slot, ids in enumerate((short, short[:2], long)):
        r.prefill(slot, ids)
    groups = r.plan_decode([5, 6, 7])
    want = [(0, 2, len(short) + 1), (2, 1, len(long) + 1)]  # (first slot, rows, positions attended)
    assert [(g.first, g.ids.shape[0], g.total) for g in groups] == want
    step = torch.cat(r.run(groups))
    with torch.inference_mode():
        ref = [model(torch.tensor([[*ids, t]])).logits[0, -1]
               for ids, t in ((short, 5), (short[:2], 6), (long, 7))]
    for got, want in zip(step, ref, strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert [len(t) for t in r.cache.tokens] == [len(short) + 1, 3, len(long) + 1]


def test_batched_prefill_matches_transformers_forward(tiny_loaded, tiny_hf):
    model, tok = tiny_hf, tiny_loaded.tokenizer
    a, b = tok.encode("The quick brown fox jumps over"), tok.encode("red green blue")
    r = Runner(tiny_loaded.model, slots=4, max_len=64, kv_dtype=torch.float32)
    r.prefill(2, a[:2])  # slot 2 already holds a prefix; slot 1 starts empty
    got = r.prefill_many(1, [b, a[2:]])
    with torch.inference_mode():
        ref_b = model(torch.tensor([b])).logits[0, -1]
        ref_a = model(torch.tensor([a])).logits[0, -1]
    torch.testing.assert_close(got[0], ref_b, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[1], ref_a, atol=1e-4, rtol=1e-4)
    # the caches are right too: a decode step continues both sequences
    step = r.decode([0, 0, 5])[1:]
    with torch.inference_mode():
        ref = [model(torch.tensor([[*b, 0]])).logits[0, -1], model(torch.tensor([[*a, 5]])).logits[0, -1]]
    torch.testing.assert_close(step[0], ref[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(step[1], ref[1], atol=1e-4, rtol=1e-4)


def test_greedy_equals_model_generate_token_for_token(tiny_loaded, tiny_hf):
    """Concurrent greedy sequences through the engine produce exactly ``model.generate()``'s
    tokens (EOS suppressed on both sides so every row runs the full length)."""
    from switchyard.engine.scheduler import Engine
    from tests.engine.conftest import Collector

    model, tok = tiny_hf, tiny_loaded.tokenizer
    prompts = ["Hello world", "The rain in Spain", "def add(a, b):", "red green blue yes no"]
    col = Collector()
    eng = Engine(tiny_loaded.model, tok, col, max_batch=4)
    eng.collector = col
    rids = [submit(eng, completion(p, temperature=0, max_tokens=20, ignore_eos=True, cache_prompt=False))
            for p in prompts]
    while eng.busy:
        eng.step()
    for p, rid in zip(prompts, rids, strict=True):
        ids = tok.encode(p)
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), max_new_tokens=20, min_new_tokens=20, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
        assert text_of(results(eng, rid)) == tok.decode(out[0, len(ids):], skip_special_tokens=True)
