"""Scoring as lm-evaluation-harness does it: echo, max_tokens 0, logprobs: the prompt's own
token logprobs, nothing generated."""

from __future__ import annotations

import pytest
import torch

from tests.engine.conftest import completion, run, text_of


def reference(model, ids: list[int]) -> list[float]:
    with torch.inference_mode():
        logp = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
    return [float(logp[i - 1, ids[i]]) for i in range(1, len(ids))]


def test_echo_with_max_tokens_0_returns_the_prompt_and_its_logprobs(tiny_engine, tiny_loaded, tiny_hf):
    prompt = "The quick brown fox jumps"
    ids = tiny_loaded.tokenizer.encode(prompt)
    chunks = run(tiny_engine, completion(prompt, echo=True, max_tokens=0, logprobs=1))
    assert text_of(chunks) == prompt
    assert chunks[-1].finish_reason == "length"
    assert chunks[-1].usage.completion_tokens == 0 and chunks[-1].usage.prompt_tokens == len(ids)
    plps = chunks[0].prompt_logprobs
    assert [lp.token for lp in plps] == [tiny_loaded.tokenizer.decode([i]) for i in ids]
    assert plps[0].logprob is None and plps[0].top == []
    assert [lp.logprob for lp in plps[1:]] == pytest.approx(reference(tiny_hf, ids), abs=1e-4)
    assert all(len(lp.top) == 1 and lp.top[0].logprob >= lp.logprob - 1e-6 for lp in plps[1:])
    assert not any(c.logprobs for c in chunks)


def test_several_token_id_prompts_score_independently(tiny_engine, tiny_loaded, tiny_hf):
    tok = tiny_loaded.tokenizer
    prompts = [tok.encode(p) for p in ("Hello world!", "def add(a, b):", "red green blue. yes no")]
    chunks = run(tiny_engine, completion(prompts, echo=True, max_tokens=0, logprobs=0))
    assert sorted(c.index for c in chunks) == [0, 1, 2]
    for c in chunks:
        ids = prompts[c.index]
        assert c.text == tok.decode(ids)
        got = [lp.logprob for lp in c.prompt_logprobs]
        assert got[0] is None and got[1:] == pytest.approx(reference(tiny_hf, ids), abs=1e-4)


def test_max_tokens_0_without_echo_is_empty(tiny_engine):
    for stream in (False, True):
        chunks = run(tiny_engine, completion("Hello world", max_tokens=0, stream=stream))
        assert text_of(chunks) == "" and chunks[-1].finish_reason == "length"
        assert chunks[-1].usage.completion_tokens == 0
