"""Both attention implementations against a plain reference, and the runner on either."""

from __future__ import annotations

import pytest
import torch

from switchyard.engine import attention
from switchyard.engine.attention import IMPLEMENTATIONS, choose
from switchyard.engine.runner import Runner


def reference(q, keys, vals, allow, scale):
    """Keys repeated per query head, explicit float64 softmax."""
    n, t, heads, hd = q.shape
    g = heads // keys.shape[1]
    k = keys.double().repeat_interleave(g, dim=1)
    v = vals.double().repeat_interleave(g, dim=1)
    s = q.double().transpose(1, 2) @ k.transpose(2, 3) * scale
    if allow is not None:
        s = s.masked_fill(~allow, float("-inf"))
    return (s.softmax(-1) @ v).transpose(1, 2).reshape(n, t, heads * hd)


@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
@pytest.mark.parametrize(("n", "t", "total"), [(1, 1, 9), (5, 1, 17), (3, 4, 12), (1, 33, 40)])
def test_implementation_matches_reference(name, n, t, total):
    gen = torch.Generator().manual_seed(n * 100 + t)
    heads, kvh, hd, cap = 6, 2, 8, 48
    cache = torch.randn(2, n + 1, kvh, cap, hd, generator=gen)  # a strided view, as the runner reads
    keys, vals = cache[0, 1:, :, :total], cache[1, 1:, :, :total]
    q = torch.randn(n, t, heads, hd, generator=gen)
    # each row sees a different number of positions; the last query position of row 0 sees all
    last = torch.tensor([total - 1 - 2 * r for r in range(n)]).clamp(min=t).view(n, 1)
    pos = last - t + 1 + torch.arange(t).view(1, t)
    allow = (torch.arange(total).view(1, 1, total) <= pos.view(n, t, 1)).view(n, 1, t, total)
    for mask in (allow, None):
        got = IMPLEMENTATIONS[name](q, keys, vals, mask, 0.3)
        torch.testing.assert_close(got.double(), reference(q, keys, vals, mask, 0.3), atol=1e-5, rtol=1e-5)


def test_choice(monkeypatch):
    assert choose("bmm", torch.device("cpu"), torch.float32, 6, 2, 8) == "bmm"
    assert choose("sdpa", torch.device("cpu"), torch.float32, 6, 2, 8) == "sdpa"
    assert choose("auto", torch.device("cuda"), torch.bfloat16, 6, 2, 8) == "sdpa"
    # auto on CPU keeps whichever timed faster (the real timer runs in every runner built on auto)
    for fast in IMPLEMENTATIONS:
        def timer(f, *args, fast=fast):
            return 1.0 if f is IMPLEMENTATIONS[fast] else 2.0

        monkeypatch.setattr(attention, "_time", timer)
        assert choose("auto", torch.device("cpu"), torch.bfloat16, 9, 3, 64) == fast


def test_runner_gives_the_same_logits_with_either(tiny_loaded):
    model, tok = tiny_loaded.model, tiny_loaded.tokenizer
    runners = {name: Runner(model, slots=3, max_len=64, kv_dtype=torch.float32, attention=name)
               for name in IMPLEMENTATIONS}
    assert {name: r.attention for name, r in runners.items()} == {name: name for name in IMPLEMENTATIONS}
    prompts = [tok.encode("The quick brown fox"), tok.encode("red"), tok.encode("def add(a, b):")]
    out = {}
    for name, r in runners.items():
        steps = [r.prefill_many(0, prompts)]
        toks = steps[0].argmax(-1).tolist()
        for _ in range(3):  # rows of different lengths: the masked decode path
            steps.append(r.decode(toks))
            toks = steps[-1].argmax(-1).tolist()
        out[name] = torch.stack(steps)
    torch.testing.assert_close(out["sdpa"], out["bmm"], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("n", "t", "total"), [(1, 1, 9), (5, 1, 17), (3, 4, 12), (1, 33, 40), (2, 3, 130)])
def test_blocked_matches_reference(n, t, total):
    """``blocked`` (the batch-invariant attention), also with keys read past what ``allow`` covers
    (the runner passes whole key blocks from the cache)."""
    gen = torch.Generator().manual_seed(n * 100 + t)
    heads, kvh, hd, cap = 6, 2, 8, 192
    cache = torch.randn(2, n + 1, kvh, cap, hd, generator=gen)
    q = torch.randn(n, t, heads, hd, generator=gen)
    last = torch.tensor([total - 1 - 2 * r for r in range(n)]).clamp(min=t).view(n, 1)
    pos = last - t + 1 + torch.arange(t).view(1, t)
    allow = (torch.arange(total).view(1, 1, total) <= pos.view(n, t, 1)).view(n, 1, t, total)
    keys, vals = cache[0, 1:, :, :total], cache[1, 1:, :, :total]
    want = reference(q, keys, vals, allow, 0.3)
    for held in (total, -(-total // attention.KEY_BLOCK) * attention.KEY_BLOCK):
        got = attention.blocked(q, cache[0, 1:, :, :held], cache[1, 1:, :, :held], allow, 0.3)
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    got = attention.blocked(q, keys, vals, None, 0.3)
    torch.testing.assert_close(got.double(), reference(q, keys, vals, None, 0.3), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_blocked_row_does_not_depend_on_its_batch(dtype):
    """A query at position p gets the same bits as a decode row alone, as a position of a prompt
    run whole, after a cached prefix, beside longer rows (masked keys) and among other rows;
    ``sdpa`` and ``bmm`` did not (the cause of issue 27's item 7)."""
    gen = torch.Generator().manual_seed(3)
    heads, kvh, hd, cap = 9, 3, 64, 512
    cache = torch.randn(2, 4, kvh, cap, hd, generator=gen).to(dtype)
    q = torch.randn(1, 300, heads, hd, generator=gen).to(dtype)
    k, v = cache[0, :1], cache[1, :1]

    def allow(pos, total):
        n, t = pos.shape
        return (torch.arange(total).view(1, 1, -1) <= pos.view(n, t, 1)).view(n, 1, t, total)

    for p in (12, 40, 150):
        alone = attention.blocked(q[:, p:p + 1], k[:, :, :p + 1], v[:, :, :p + 1], None, 0.125)
        got = []
        for t in (p + 1, p + 40):  # a prompt run whole
            pos = torch.arange(t).view(1, t)
            whole = attention.blocked(q[:, :t], k[:, :, :t], v[:, :, :t], allow(pos, t), 0.125)
            got.append(whole[:, p:p + 1])
        for s in (p, p - 10):  # after a cached prefix
            pos = torch.arange(s, p + 3).view(1, -1)
            got.append(attention.blocked(q[:, s:p + 3], k[:, :, :p + 3], v[:, :, :p + 3], allow(pos, p + 3),
                                         0.125)[:, p - s:p - s + 1])
        for total in (p + 30, 400):  # beside a longer row
            got.append(attention.blocked(q[:, p:p + 1], k[:, :, :total], v[:, :, :total],
                                         allow(torch.tensor([[p]]), total), 0.125))
        keys, vals = cache[0, :, :, :p + 1].clone(), cache[1, :, :, :p + 1].clone()
        qs = torch.cat([q[:, p:p + 1], torch.randn(3, 1, heads, hd, generator=gen).to(dtype)])
        got.append(attention.blocked(qs, keys, vals, None, 0.125)[:1])  # among other rows
        for x in got:
            assert torch.equal(x, alone)
