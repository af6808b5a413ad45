"""The KV cache gives memory back: a released slot's pages leave the process's resident set, its
neighbours keep their data, and the engine keeps free slots' prompts within a budget (LRU)."""

from __future__ import annotations

import os

import torch
from hypothesis import given
from hypothesis import strategies as st

from bench.overhead import rss_mib
from switchyard.engine.kvcache import KVCache, common_prefix
from switchyard.engine.scheduler import Engine
from tests.engine.conftest import Collector, completion, run


def test_release_gives_pages_back_and_keeps_the_neighbours():
    # 2 layers x 2 x 4 rows x 2 heads x 64 dims x 4 bytes = 8 KiB a position: 256 MiB reserved
    cache = KVCache(layers=2, slots=3, kv_heads=2, head_dim=64, max_len=32768, dtype=torch.float32)
    assert cache.lazy and cache.capacity == 32768
    n = 16384
    for slot in range(3):
        cache.kv[:, :, slot, :, :n] = slot + 1.0
        cache.tokens[slot] = list(range(n))
    before = rss_mib(os.getpid())
    cache.release(1)
    freed = before - rss_mib(os.getpid())
    # slot 1 held 2 x 2 x 2 x 16384 x 256 bytes = 32 MiB
    assert 31 <= freed <= 33, freed
    assert cache.tokens[1] == [] and cache.tokens[0] == cache.tokens[2] == list(range(n))
    # its pages read as zeros again (all but the partial pages at the ends of each run)
    assert float((cache.kv[:, :, 1, :, :n] == 0).float().mean()) > 0.99
    for slot in (0, 2):
        assert bool((cache.kv[:, :, slot, :, :n] == slot + 1.0).all())


def test_prompt_cache_budget_in_positions(tiny_loaded):
    # 2 layers x 2 x 2 heads x 64 dims x 4 bytes = 2 KiB a position of one slot
    cache = KVCache(layers=2, slots=3, kv_heads=2, head_dim=64, max_len=64, dtype=torch.float32)
    assert cache.positions_in(1 << 20) == 512
    eng = Engine(tiny_loaded.model, tiny_loaded.tokenizer, Collector(), max_batch=4, prompt_cache_mib=3)
    slot_position = eng.runner.cache.kv[:, :, 0, :, 0].numel() * 4  # float32 fixture
    assert eng.cache_budget == (3 << 20) // slot_position


def test_free_slots_keep_prompts_within_the_budget_least_recently_used_out(tiny_loaded):
    col = Collector()
    eng = Engine(tiny_loaded.model, tiny_loaded.tokenizer, col, max_batch=4)
    eng.collector = col
    tok = tiny_loaded.tokenizer
    a, b = "The quick brown fox jumps over the lazy dog", "Lorem ipsum dolor sit amet, consectetur"
    run(eng, completion(a, temperature=0, max_tokens=4))
    run(eng, completion(b, temperature=0, max_tokens=4))  # takes slot 0; a's prompt moves aside
    assert sum(bool(t) for t in eng.runner.cache.tokens) == 2
    # room for one finished sequence (15 or 12 prompt tokens + 4), not both: a, the older, goes
    assert (len(tok.encode(a)), len(tok.encode(b))) == (15, 12)
    eng.cache_budget = 20
    eng.step()
    held = [t for t in eng.runner.cache.tokens if t]
    assert len(held) == 1 and held[0][: len(tok.encode(b))] == tok.encode(b)
    cached = lambda prompt: run(eng, completion(prompt, temperature=0, max_tokens=4))[-1].usage.cached_tokens  # noqa: E731
    assert cached(a) == 0  # forgotten; now a is the most recent and b goes
    assert [t[:len(tok.encode(a))] for t in eng.runner.cache.tokens if t] == [tok.encode(a)]
    eng.cache_budget = 10_000
    assert cached(b) == 0
    assert cached(a) >= len(tok.encode(a)) - 1  # kept beside b, though b took its slot meanwhile
    # no budget: nothing stays once a sequence leaves
    eng.cache_budget = 0
    run(eng, completion(b, temperature=0, max_tokens=4))
    assert not any(eng.runner.cache.tokens)


def test_common_prefix_finds_a_difference_at_every_position():
    base = list(range(70))
    for k in range(70):  # on both sides of each compared slice's bounds
        assert common_prefix(base, [*base[:k], -1, *base[k + 1:]]) == k
        assert common_prefix(base, base[:k]) == common_prefix(base[:k], base) == k


@given(st.lists(st.integers(0, 2), max_size=60),
       st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3), st.integers(0, 60)), min_size=1, max_size=6))
def test_best_prefix_is_the_first_slot_sharing_the_most_tokens(prompt, edits):
    # the prompt with one token changed (or not: 3), cut anywhere: prefixes of every length
    held = [[*prompt[:k], x, *prompt[k + 1:]][:cut] if x < 3 else prompt[:cut] for k, x, cut in edits]

    def shared(a: list[int], b: list[int]) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    cache = KVCache(layers=1, slots=len(held), kv_heads=1, head_dim=8, max_len=64, dtype=torch.float32)
    cache.tokens = [list(h) for h in held]
    for h in held:
        assert common_prefix(h, prompt) == shared(h, prompt)
    lengths = [shared(h, prompt) for h in held]
    most = max(lengths)
    assert cache.best_prefix(prompt, list(range(len(held)))) == (
        (lengths.index(most), most) if most else (None, 0))
