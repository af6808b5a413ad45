"""Each logits processor on its own, on hand-made logits."""

from __future__ import annotations

import math

import pytest
import torch

from switchyard.core.canonical import CanonicalRequest, Dry, Mirostat
from switchyard.core.errors import InvalidRequest
from switchyard.engine.sampling.bias import LogitBias
from switchyard.engine.sampling.dry import DryPenalty, dry_penalties
from switchyard.engine.sampling.mirostat import MirostatSampler, truncate
from switchyard.engine.sampling.params import RowState, SamplingParams, resolve
from switchyard.engine.sampling.penalties import PresenceFrequencyPenalty, RepetitionPenalty
from switchyard.engine.sampling.pipeline import Pipeline
from switchyard.engine.sampling.temperature import Temperature
from switchyard.engine.sampling.truncation import MinP, TopK, TopP, TypicalP

INF = float("-inf")


def rows(*params: SamplingParams, prompt: list[int] | None = None, out: list[list[int]] | None = None):
    rs = [RowState(p, list(prompt or [])) for p in params]
    for r, o in zip(rs, out or [[] for _ in rs], strict=True):
        r.output_ids = list(o)
    return rs


def run(proc, logits: torch.Tensor, rs) -> torch.Tensor:
    proc.update_state(rs)
    return proc.apply(logits.clone()) if proc.active else logits.clone()


def test_logit_bias_adds_per_row():
    rs = rows(SamplingParams(logit_bias={1: 5.0, 3: -100}), SamplingParams())
    out = run(LogitBias(), torch.zeros(2, 4), rs)
    assert out[0].tolist() == [0, 5, 0, -100]
    assert out[1].tolist() == [0, 0, 0, 0]


def test_logit_bias_validation_names_param():
    with pytest.raises(InvalidRequest) as e:
        LogitBias().validate(SamplingParams(logit_bias={99: 1.0}), vocab_size=10)
    assert e.value.param == "logit_bias"
    with pytest.raises(InvalidRequest):
        LogitBias().validate(SamplingParams(logit_bias={1: 101.0}), vocab_size=10)


def test_repetition_penalty_is_multiplicative_over_prompt_and_output():
    rs = rows(SamplingParams(repetition_penalty=2.0), prompt=[0], out=[[1]])
    out = run(RepetitionPenalty(), torch.tensor([[4.0, -4.0, 4.0]]), rs)
    assert out[0].tolist() == [2.0, -8.0, 4.0]


def test_presence_and_frequency_penalties_count_output_tokens():
    p = SamplingParams(presence_penalty=1.0, frequency_penalty=0.5)
    rs = rows(p, SamplingParams(), prompt=[2], out=[[0, 0, 1], [0]])
    out = run(PresenceFrequencyPenalty(), torch.zeros(2, 3), rs)
    assert out[0].tolist() == [-2.0, -1.5, 0.0]  # prompt token 2 is not penalised
    assert out[1].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(InvalidRequest) as e:
        PresenceFrequencyPenalty().validate(SamplingParams(presence_penalty=3), 10)
    assert e.value.param == "presence_penalty"


def test_dry_penalises_the_token_that_extends_a_repeat():
    # history: 1 2 3 9 1 2 -> continuing with 3 would repeat "1 2 3" (match length 2).
    pen = dry_penalties([1, 2, 3, 9, 1, 2], frozenset(), multiplier=1.0, base=2.0, allowed_length=2)
    assert pen == {3: 1.0}
    longer = dry_penalties([1, 2, 3, 4, 9, 1, 2, 3], frozenset(), 1.0, 2.0, 2)
    assert longer == {4: 2.0}
    # A sequence breaker inside the match stops it.
    assert dry_penalties([1, 2, 3, 9, 1, 2], frozenset({1}), 1.0, 2.0, 2) == {}
    assert dry_penalties([1, 2, 3, 9, 1, 2], frozenset(), 1.0, 2.0, 3) == {}


def test_dry_processor_applies_to_its_row_only():
    p = SamplingParams(dry=Dry(multiplier=1.0, base=2.0, allowed_length=2))
    rs = rows(p, SamplingParams(), prompt=[1, 2, 3, 0, 1, 2])
    out = run(DryPenalty(), torch.zeros(2, 5), rs)
    assert out[0].tolist() == [0, 0, 0, -1.0, 0]
    assert out[1].tolist() == [0] * 5


def test_temperature_scales_and_leaves_greedy_rows():
    rs = rows(SamplingParams(temperature=0.5), SamplingParams(temperature=0.0))
    out = run(Temperature(), torch.tensor([[1.0, 2.0], [1.0, 2.0]]), rs)
    assert out.tolist() == [[2.0, 4.0], [1.0, 2.0]]


def test_top_k_keeps_k_best_per_row():
    rs = rows(SamplingParams(top_k=2), SamplingParams(top_k=1), SamplingParams())
    logits = torch.tensor([[1.0, 4.0, 3.0, 2.0]] * 3)
    out = run(TopK(), logits, rs)
    assert out[0].tolist() == [INF, 4.0, 3.0, INF]
    assert out[1].tolist() == [INF, 4.0, INF, INF]
    assert out[2].tolist() == [1.0, 4.0, 3.0, 2.0]


def test_top_p_keeps_the_nucleus():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    out = run(TopP(), probs.log(), rows(SamplingParams(top_p=0.7)))
    assert torch.isfinite(out[0]).tolist() == [True, True, False, False]
    out = run(TopP(), probs.log(), rows(SamplingParams(top_p=0.1)))
    assert torch.isfinite(out[0]).tolist() == [True, False, False, False]


def test_min_p_drops_tokens_below_fraction_of_best():
    probs = torch.tensor([[0.6, 0.3, 0.06, 0.04]])
    out = run(MinP(), probs.log(), rows(SamplingParams(min_p=0.1)))
    assert torch.isfinite(out[0]).tolist() == [True, True, False, False]


def test_typical_p_keeps_tokens_near_the_entropy():
    probs = torch.tensor([[0.4, 0.3, 0.2, 0.1]])
    out = run(TypicalP(), probs.log(), rows(SamplingParams(typical_p=0.4)))
    kept = torch.isfinite(out[0]).tolist()
    # Entropy ~1.28 nats; surprises 0.92, 1.20, 1.61, 2.30: by closeness tokens 1 (p .3), 2 (p .2),
    # 0; the smallest such set reaching 0.4 of the mass is {1, 2}: the most likely token goes.
    assert kept == [False, True, True, False]


def test_mirostat_v2_truncates_by_surprise_and_updates_mu():
    probs = torch.tensor([0.5, 0.25, 0.125, 0.125])
    # surprises in bits: 1, 2, 3, 3; mu=2.5 keeps the first two.
    assert torch.isfinite(truncate(probs.log(), 2, 2.5)).tolist() == [True, True, False, False]
    assert torch.isfinite(truncate(probs.log(), 2, 0.1)).tolist() == [True, False, False, False]
    p = SamplingParams(mirostat=Mirostat(mode=2, tau=3.0, eta=0.5))
    rs = rows(p)
    proc = MirostatSampler()
    assert rs[0].mu == 6.0
    run(proc, probs.log().view(1, -1), rs)
    logp = torch.tensor([[math.log(0.25)] * 4])
    proc.on_sampled([0], logp)  # observed surprise 2 bits -> mu += 0.5 * (3 - 2)
    assert rs[0].mu == pytest.approx(6.5)


def test_mirostat_v1_keeps_more_tokens_for_a_larger_mu():
    logits = -torch.arange(50, dtype=torch.float32) * 0.3
    small = int(torch.isfinite(truncate(logits, 1, 1.0)).sum())
    large = int(torch.isfinite(truncate(logits, 1, 8.0)).sum())
    assert 1 <= small < large


def test_mirostat_validation():
    with pytest.raises(InvalidRequest) as e:
        MirostatSampler().validate(SamplingParams(mirostat=Mirostat(mode=3)), 10)
    assert e.value.param == "mirostat"


@pytest.mark.parametrize(("field", "value"), [
    ("temperature", -1.0), ("top_p", 0.0), ("top_p", 1.5), ("min_p", 2.0), ("typical_p", 0.0),
    ("top_k", -5), ("repetition_penalty", 0.0), ("frequency_penalty", -3.0),
])
def test_pipeline_validation_names_the_param(field, value):
    with pytest.raises(InvalidRequest) as e:
        Pipeline().validate(SamplingParams(**{field: value}), 100)
    assert e.value.param == field


def test_greedy_and_seeded_sampling():
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(1))
    pipe = Pipeline()
    assert pipe.sample(logits.clone(), rows(SamplingParams(temperature=0.0))) == [int(logits.argmax())]
    draws = []
    for _ in range(2):
        r = rows(SamplingParams(seed=7))
        draws.append([Pipeline().sample(logits.clone(), r)[0] for _ in range(10)])
    assert draws[0] == draws[1]
    assert len(set(draws[0])) > 1  # really sampling


def test_resolve_uses_dialect_defaults():
    req = CanonicalRequest(kind="completion", model="m", dialect="llamacpp", prompt=["x"], top_p=0.5)
    p = resolve(req)
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.repetition_penalty) == (0.8, 40, 0.5, 0.05, 1.1)
    assert resolve(CanonicalRequest(kind="completion", model="m", dialect="openai", seed=3), 2).seed == 5


def test_vectorized_draw_follows_the_distribution_and_keeps_greedy_rows():
    probs = torch.tensor([0.6, 0.3, 0.1, 0.0])
    n = 4000
    rs = rows(*[SamplingParams(temperature=1.0) for _ in range(n)], SamplingParams(temperature=0.0))
    logits = probs.log().repeat(n + 1, 1)
    logits[-1] = torch.tensor([0.0, 0.0, 5.0, 0.0])  # the greedy row's argmax is token 2
    tokens = Pipeline().sample(logits, rs)
    assert tokens[-1] == 2
    freq = torch.bincount(torch.tensor(tokens[:n]), minlength=4).float() / n
    assert freq[3] == 0  # a zero-probability token is never drawn
    torch.testing.assert_close(freq, probs, atol=0.03, rtol=0)


def test_seeded_rows_draw_the_same_whatever_the_batch():
    logits = torch.randn(1, 50)

    def draws(position: int, batch: int) -> list[int]:
        params = [SamplingParams(temperature=1.0) for _ in range(batch)]
        params[position] = SamplingParams(temperature=1.0, seed=7)
        rs, pipe = rows(*params), Pipeline()
        return [pipe.sample(logits.repeat(batch, 1), rs)[position] for _ in range(20)]

    assert draws(0, 1) == draws(3, 6) == draws(1, 2)
    assert len(set(draws(0, 1))) > 1  # it does draw, not argmax
