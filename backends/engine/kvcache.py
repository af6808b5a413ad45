"""A slot-based KV cache shared by all sequences of the batch.

Each layer keeps one key and one value tensor shaped ``[slots, kv_heads, capacity, head_dim]``.
Active sequences always sit in slots ``0..B-1`` (the scheduler swaps a leaving sequence to the
end), so a decode step attends over the view ``[:B, :, :max_len]`` without gathering anything.
Free slots keep their tokens: a new prompt sharing a prefix with one of them copies that
prefix instead of recomputing it (prompt caching).
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, layers: int, slots: int, kv_heads: int, head_dim: int, max_len: int,
                 dtype: torch.dtype, initial: int = 256) -> None:
        self.layers, self.slots, self.kv_heads, self.head_dim = layers, slots, kv_heads, head_dim
        self.max_len = max_len
        self.dtype = dtype
        self.capacity = 0
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        # The token ids whose keys/values each slot holds (its valid length is len(tokens[s])).
        self.tokens: list[list[int]] = [[] for _ in range(slots)]
        self.ensure(min(initial, max_len))

    def ensure(self, needed: int) -> None:
        """Grow every layer's buffers to hold ``needed`` positions (doubling, capped at max_len)."""
        if needed <= self.capacity:
            return
        cap = max(needed, min(self.max_len, max(256, self.capacity * 2)))
        shape = (self.slots, self.kv_heads, cap, self.head_dim)
        new_k = [torch.zeros(shape, dtype=self.dtype) for _ in range(self.layers)]
        new_v = [torch.zeros(shape, dtype=self.dtype) for _ in range(self.layers)]
        used = max((len(t) for t in self.tokens), default=0)
        if self.capacity and used:
            for old, new in zip(self.k + self.v, new_k + new_v, strict=True):
                new[:, :, :used].copy_(old[:, :, :used])
        self.k, self.v, self.capacity = new_k, new_v, cap

    def length(self, slot: int) -> int:
        return len(self.tokens[slot])

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """Make slot ``dst`` hold the first ``n`` positions of slot ``src``."""
        if src != dst and n:
            for t in self.k + self.v:
                t[dst, :, :n].copy_(t[src, :, :n])
        self.tokens[dst] = self.tokens[src][:n]

    def swap(self, a: int, b: int) -> None:
        if a == b:
            return
        n = max(len(self.tokens[a]), len(self.tokens[b]))
        if n:
            for t in self.k + self.v:
                tmp = t[a, :, :n].clone()
                t[a, :, :n].copy_(t[b, :, :n])
                t[b, :, :n].copy_(tmp)
        self.tokens[a], self.tokens[b] = self.tokens[b], self.tokens[a]

    def best_prefix(self, prompt: list[int], candidates: list[int]) -> tuple[int | None, int]:
        """The candidate slot sharing the longest prefix with ``prompt``, and that length."""
        best, best_n = None, 0
        for s in candidates:
            n = common_prefix(self.tokens[s], prompt)
            if n > best_n:
                best, best_n = s, n
        return best, best_n


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
