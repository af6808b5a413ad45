"""lm-evaluation-harness scoring against the real SmolLM2 through the gateway's /v1/completions:
the summed continuation logprob equals what transformers computes on the same weights."""

from __future__ import annotations

import pytest
import pytest_asyncio
import torch

from tests.engine.conftest import engine_gateway

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

PAIRS = [("The capital of France is", " Paris"), ("2 + 2 =", " 4"), ("The sky is", " blue and clear."),
         ("Question: What do bees make?\nAnswer:", " honey")]


@pytest.fixture(scope="module")
def reference():
    """Plain transformers on the engine's converted folder: [(ctx ids, cont ids, sum, greedy)]."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from switchyard.core.deployments import EngineConfig
    from switchyard.engine.loader import resolve_folder

    folder = resolve_folder(EngineConfig())
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    out = []
    for context, continuation in PAIRS:  # lm-eval's _encode_pair
        whole, ctx = tok.encode(context + continuation), tok.encode(context)
        cont = whole[len(ctx):]
        with torch.inference_mode():
            logp = model(torch.tensor([whole])).logits[0].float().log_softmax(-1)
        rows = logp[len(ctx) - 1: len(whole) - 1]
        target = torch.tensor(cont)
        total = float(rows[torch.arange(len(cont)), target].sum())
        greedy = bool((rows.argmax(-1) == target).all())
        out.append((ctx, cont, total, greedy))
    return out


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway():
    async with engine_gateway(None, dtype="float32") as client:  # scored against fp32 transformers
        yield client


def score(choice: dict, ctxlen: int, end: int | None) -> tuple[float, bool]:
    """lm-eval's parse_logprobs for the completions API."""
    lps = choice["logprobs"]["token_logprobs"][ctxlen:end]
    tops = choice["logprobs"]["top_logprobs"][ctxlen:end]
    return sum(lps), all(lp == max(top.values()) for lp, top in zip(lps, tops, strict=True))


@pytest.mark.parametrize("max_tokens, end", [(0, None), (1, -1)])  # older and newer lm-eval
async def test_token_id_prompts_score_like_transformers(gateway, reference, max_tokens, end):
    ref = reference
    body = {"model": "local/m", "prompt": [ctx + cont for ctx, cont, _, _ in ref], "echo": True,
            "max_tokens": max_tokens, "logprobs": 1, "temperature": 0, "seed": 1234}
    r = await gateway.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    choices = sorted(r.json()["choices"], key=lambda c: c["index"])
    assert len(choices) == len(ref)
    for choice, (ctx, cont, total, greedy) in zip(choices, ref, strict=True):
        lp = choice["logprobs"]
        assert len(lp["tokens"]) == len(ctx) + len(cont) + max_tokens
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        got, got_greedy = score(choice, len(ctx), end)
        assert got == pytest.approx(total, abs=1e-3)
        assert got_greedy == greedy


async def test_string_prompt_offsets_cover_the_echoed_text(gateway, reference):
    ref = reference
    context, continuation = PAIRS[0]
    r = await gateway.post("/v1/completions", json={
        "model": "local/m", "prompt": context + continuation, "echo": True, "max_tokens": 0, "logprobs": 1})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    text, lp = choice["text"], choice["logprobs"]
    assert text == context + continuation and choice["finish_reason"] == "length"
    assert [text[o: o + len(t)] for o, t in zip(lp["text_offset"], lp["tokens"], strict=True)] == lp["tokens"]
    assert score(choice, len(ref[0][0]), None)[0] == pytest.approx(ref[0][2], abs=1e-3)
    assert r.json()["usage"]["completion_tokens"] == 0
