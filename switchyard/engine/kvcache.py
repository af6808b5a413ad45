"""A slot-based KV cache shared by all sequences of the batch.

One tensor ``[layers, 2 (key, value), rows + 1 (a scratch row), kv_heads, capacity, head_dim]`` on the model's
device. Active sequences always sit in slots ``0..B-1`` (the scheduler swaps a leaving sequence
to the end), so a decode step attends over the view ``[:B, :, :max_len]`` without gathering
anything. Free slots keep their tokens: a new prompt sharing a prefix with one of them copies
that prefix instead of recomputing it (prompt caching).

Sized by what is in flight. On CPU all slots and as many positions as fit in half the machine's
memory (up to ``max_len``) are reserved at once: a fresh large allocation is an anonymous mapping
whose pages the kernel supplies zeroed on first touch, so only the positions sequences actually
wrote are resident (an idle engine holds none), and the cache does not move when a long prompt
arrives (no reallocation stall). On CUDA it starts at one slot and grows in chunks (slots by
``SLOT_CHUNK``, positions by ``POS_CHUNK`` or half the capacity, whichever is more), copying
what is held; so does a CPU cache asked for more than its reservation (lazily again).
One row past the slots is scratch: a static-shape decode step (CUDA graphs) writes its padding rows there.
A released slot (the scheduler keeps free slots' prompts within a budget) gives its pages back
to the kernel in a lazily reserved cache, so the resident set follows what is held.
"""

from __future__ import annotations

import mmap
import os

import torch

from switchyard.engine.libc import madvise_dontneed

SLOT_CHUNK = 8
POS_CHUNK = 256
INITIAL_POS = 64  # an idle engine holds next to nothing
LAZY_MIN_BYTES = 64 << 20  # above glibc's largest mmap threshold (32 MiB): always a fresh mapping


class KVCache:
    def __init__(self, layers: int, slots: int, kv_heads: int, head_dim: int, max_len: int,
                 dtype: torch.dtype, device: torch.device | str = "cpu") -> None:
        self.layers, self.slots, self.kv_heads, self.head_dim = layers, slots, kv_heads, head_dim
        self.max_len = max_len
        self.dtype = dtype
        self.device = torch.device(device)
        self.capacity = 0
        self.rows = 0  # slots allocated (the scratch row comes on top)
        self.kv = torch.empty(0)
        # The token ids whose keys/values each slot holds (its valid length is len(tokens[s])).
        self.tokens: list[list[int]] = [[] for _ in range(slots)]
        # Whether every position a slot holds was computed by an invariant step (runner.invariant):
        # only such prefixes are reused for greedy and seeded prompts.
        self.exact = [True] * slots
        self.used_at = [0] * slots  # when each slot's tokens were last in use (prompt-cache LRU)
        self.lazy = False  # a fresh mapping whose untouched pages are not resident
        self.generation = 0  # bumped on every reallocation (captured graphs hold the old tensor)
        self.position_bytes = (layers * 2 * (slots + 1) * kv_heads * head_dim
                               * torch.empty(0, dtype=dtype).element_size())
        reserve = min(max_len, _memory_bytes() // 2 // self.position_bytes)
        if self.device.type == "cpu" and reserve >= INITIAL_POS:
            self._allocate(reserve, slots)
        else:
            self.ensure(min(INITIAL_POS, max_len), 1)

    @property
    def scratch(self) -> int:
        return self.rows

    def ensure(self, needed: int, slots: int = 0) -> None:
        """Room for ``needed`` positions in ``slots`` slots (grown in chunks, never shrunk)."""
        if needed <= self.capacity and slots <= self.rows:
            return
        if needed > self.max_len or slots > self.slots:
            raise ValueError(f"KV cache asked for {slots} slots x {needed} positions "
                             f"(limit {self.slots} x {self.max_len})")
        cap, rows = self.capacity, self.rows
        if not cap:  # the first allocation is exactly what was asked (an idle engine)
            cap, rows = needed, slots
        if needed > cap:
            cap = min(self.max_len, _round_up(max(needed, cap + cap // 2), POS_CHUNK))
        if slots > rows:
            rows = min(self.slots, _round_up(slots, SLOT_CHUNK))
        self._allocate(cap, rows)

    def _allocate(self, cap: int, rows: int) -> None:
        """A new tensor holding what the old one held. Every position must read as a finite
        number (masked scores are zero weights, but 0 * NaN is NaN): zeros, or on CPU, for an
        allocation large enough to be a fresh mapping, the kernel's zeroed pages (not touched
        here, so not resident)."""
        shape = (self.layers, 2, rows + 1, self.kv_heads, cap, self.head_dim)
        size = cap * self.position_bytes // (self.slots + 1) * (rows + 1)  # this tensor's bytes
        lazy = self.device.type == "cpu" and size >= LAZY_MIN_BYTES
        make = torch.empty if lazy else torch.zeros
        new = make(shape, dtype=self.dtype, device=self.device)
        used = max((len(t) for t in self.tokens[:self.rows]), default=0)
        if self.rows and used:
            new[:, :, :self.rows, :, :used].copy_(self.kv[:, :, :self.rows, :, :used])
        self.kv, self.capacity, self.rows = new, cap, rows
        self.lazy = lazy
        self.generation += 1

    def layer(self, i: int) -> torch.Tensor:
        """Layer ``i``'s ``[2, rows + 1, kv_heads, capacity, head_dim]`` (contiguous)."""
        return self.kv[i]

    def positions_in(self, nbytes: int) -> int:
        """How many positions of one slot ``nbytes`` hold."""
        return nbytes * (self.slots + 1) // self.position_bytes

    def length(self, slot: int) -> int:
        return len(self.tokens[slot])

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """Make slot ``dst`` hold the first ``n`` positions of slot ``src``."""
        if src != dst and n:
            self.kv[:, :, dst, :, :n].copy_(self.kv[:, :, src, :, :n])
        self.tokens[dst] = self.tokens[src][:n]
        self.exact[dst] = self.exact[src]

    def swap(self, a: int, b: int) -> None:
        if a == b:
            return
        na, nb = len(self.tokens[a]), len(self.tokens[b])
        kv, n = self.kv, max(na, nb)
        if not (na and nb):  # one side holds nothing: a one-way copy
            src, dst = (a, b) if na else (b, a)
            kv[:, :, dst, :, :n].copy_(kv[:, :, src, :, :n])
        else:
            tmp = kv[:, :, a, :, :n].clone()
            kv[:, :, a, :, :n].copy_(kv[:, :, b, :, :n])
            kv[:, :, b, :, :n].copy_(tmp)
        self.tokens[a], self.tokens[b] = self.tokens[b], self.tokens[a]
        self.used_at[a], self.used_at[b] = self.used_at[b], self.used_at[a]
        self.exact[a], self.exact[b] = self.exact[b], self.exact[a]

    def truncate(self, slot: int, n: int) -> None:
        """Keep the first ``n`` positions of ``slot`` (an emptied slot starts exact)."""
        self.tokens[slot] = self.tokens[slot][:n]
        if not n:
            self.exact[slot] = True

    def release(self, slot: int) -> None:
        """Forget what ``slot`` holds and, in a lazily reserved cache, give its pages back to the
        kernel (they read as zeros when touched again, which masked positions tolerate)."""
        n, self.tokens[slot] = len(self.tokens[slot]), []
        self.exact[slot] = True
        if not (self.lazy and n and slot < self.rows):
            return
        elt = self.kv.element_size()
        row = self.capacity * self.head_dim * elt  # one (layer, k/v, slot, head) run of positions
        used = n * self.head_dim * elt
        base = self.kv.data_ptr()
        for layer in range(self.layers):
            for half in range(2):
                first = ((layer * 2 + half) * (self.rows + 1) + slot) * self.kv_heads
                for head in range(first, first + self.kv_heads):
                    start = base + head * row
                    # only pages wholly inside this run: a page shared with a neighbour keeps its data
                    lo = _round_up(start, PAGE)
                    hi = min(_round_up(start + used, PAGE), (start + row) // PAGE * PAGE)
                    if hi > lo:
                        madvise_dontneed(lo, hi - lo)

    def best_prefix(self, prompt: list[int], candidates: list[int]) -> tuple[int | None, int]:
        """The candidate slot sharing the longest prefix with ``prompt``, and that length. A slot
        can only do better than the best so far if it matches at that length too, checked first:
        slots sharing a system prompt then cost one comparison each."""
        best, best_n = None, 0
        for s in candidates:
            held = self.tokens[s]
            if len(held) > best_n < len(prompt) and held[best_n] == prompt[best_n]:
                n = common_prefix(held, prompt)
                if n > best_n:
                    best, best_n = s, n
        return best, best_n


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share: slices of doubling length compared in C,
    then the differing one element by element."""
    n = min(len(a), len(b))
    i, step = 0, 8
    while i < n:
        j = min(i + step, n)
        if a[i:j] != b[i:j]:
            while a[i] == b[i]:
                i += 1
            return i
        i, step = j, step * 2
    return n


PAGE = mmap.PAGESIZE


def _memory_bytes() -> int:
    try:
        return PAGE * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def _round_up(n: int, chunk: int) -> int:
    return -(-n // chunk) * chunk
