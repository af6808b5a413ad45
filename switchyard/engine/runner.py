"""One forward pass for many sequences over the slot KV cache.

For Llama-style decoders (llama, mistral, qwen2: pre-norm, rotary, GQA, gated MLP) the engine
runs its own forward over its own fused weights (``weights.py``) and cache layout: a decode step
feeds one token per active slot, attends over a view of the cache and costs ~35 torch ops per
layer, instead of ``generate()``'s per-step framework work (cache objects, mask builders, logits
processors, stopping criteria). Decode, batched prefill, prefill chunks and scoring (logits at
every position) are the same forward with different shapes.

Attention reads a strided view of the cache through one of two implementations, the faster on
this machine (``attention.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from switchyard.engine import rope
from switchyard.engine.attention import IMPLEMENTATIONS, KEY_BLOCK, blocked, choose
from switchyard.engine.cudagraph import GraphedDecode
from switchyard.engine.kvcache import KVCache
from switchyard.engine.weights import Model

# Row-positions of attention a second decode group must save to pay for its extra attention
# call per layer (~2 ms a step; attending costs ~2.5 us a row-position over 30 layers in float32
# on the AVX2 EPYC, less in bfloat16 on the Xeon: so a margin).
SPLIT_SAVING = 2048
# Rows a product of an invariant step takes at once (the last block padded to two rows). The
# kernels choose their algorithm by the row count: here bfloat16's products of up to 32 rows
# share one (33 and more another) and float32's lm_head one for 2 rows and more (one row
# another), so a row's result depends on the batch around it unless blocked (tested).
INVARIANT_ROWS = 32


@dataclass
class Rows:
    """One group of a forward's rows: ``ids`` and ``pos`` ``[n, t]`` for slots ``first..first+n-1``
    (keys and values written to slots ``write`` ``[n]`` instead, when given), attending over
    ``total`` cached positions under ``allow``. ``take``: the flattened rows whose logits the
    caller wants (None: all); ``append``: the tokens each slot holds once run."""

    ids: torch.Tensor
    pos: torch.Tensor
    first: int
    total: int
    allow: torch.Tensor | None
    take: torch.Tensor | None
    append: list[tuple[int, list[int]]]
    write: torch.Tensor | None = None


@dataclass
class Replay:
    """A decode step replayed from a captured CUDA graph: ``tokens[b]`` fed to slot ``b``. The
    graph has its own input buffers, so nothing is built for it while the step is planned."""

    tokens: list[int]


Group = Rows | Replay


class Pass:
    """What one engine step runs: groups of rows gathered while the step is planned and run
    together in one forward (``flush`` runs what is pending sooner, when a later admission must
    read what they write), and the logits of the groups kept, in the order added."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self._items: list[tuple[Group | torch.Tensor, bool]] = []  # (group or its logits, kept)

    def add(self, groups: Sequence[Group], keep: bool = True) -> None:
        self._items += [(g, keep) for g in groups]

    def add_logits(self, logits: torch.Tensor) -> None:
        """Logits computed apart (echo with logprobs), kept in this place of the order."""
        self._items.append((logits, True))

    def flush(self) -> None:
        todo = [i for i, (x, _) in enumerate(self._items) if not isinstance(x, torch.Tensor)]
        if todo:
            out = self.runner.run([self._items[i][0] for i in todo])  # type: ignore[misc]  # only groups are left to run
            for i, logits in zip(todo, out, strict=True):
                self._items[i] = (logits, self._items[i][1])

    def logits(self) -> torch.Tensor:
        self.flush()
        kept = [x for x, keep in self._items if keep]
        return _flat(kept)  # type: ignore[arg-type]  # flushed: every kept item is logits


class Runner:
    def __init__(self, model: Model, slots: int, max_len: int, kv_dtype: torch.dtype,
                 cuda_graphs: bool = True, attention: str = "auto") -> None:
        spec, self.w = model.spec, model.weights
        self.device, self.dtype = self.w.device, self.w.dtype
        self.act = spec.act
        self.heads = spec.heads
        self.kv_heads = spec.kv_heads
        self.head_dim = spec.head_dim
        self.scale = self.head_dim ** -0.5
        self.attention = choose(attention, self.device, self.dtype, self.heads, self.kv_heads, self.head_dim)
        self.attend = IMPLEMENTATIONS[self.attention]
        self.cache = KVCache(len(self.w.layers), slots, self.kv_heads, self.head_dim, max_len, kv_dtype,
                             self.device)
        # cos/sin for every position, computed once (spec.py admits only static rotary types).
        cos, sin = rope.tables(spec, max_len, self.device, self.dtype)
        self._rope = (cos, _signed_sin(sin))
        # Set by the engine for a step holding greedy or seeded rows (CPU): products in row
        # blocks and ``blocked`` attention, so such a row's numbers do not depend on its batch,
        # on how its prompt was split between the prompt cache and this step, or on padding.
        self.invariant = False
        self._mm_rows = _row_blocks(self.w.mm)
        self._head_rows = _row_blocks(self.w.logits)
        # On CUDA, decode steps replay captured graphs (a step is otherwise launch-bound).
        self.graphs: GraphedDecode | None = None
        if cuda_graphs and self.device.type == "cuda":
            self.graphs = GraphedDecode(self, capture=True)

    def tensor(self, data: object, dtype: torch.dtype = torch.long) -> torch.Tensor:
        return torch.tensor(data, dtype=dtype, device=self.device)

    # -- public steps -------------------------------------------------------------------------

    def plan_decode(self, tokens: list[int]) -> list[Group]:
        """Rows feeding ``tokens[b]`` to slot ``b`` for b in 0..B-1; their logits are ``[B, V]``
        in slot order. Rows of very different lengths go in two groups (slots ``0..k-1`` and
        ``k..B-1``), each attending over its own longest row, when that saves ``SPLIT_SAVING``
        row-positions: 16 short rows beside one at 2,000 positions cost 189 ms a step as one
        group, 117 as two (float32, AVX2 EPYC). Under CUDA graphs: one replayed static step."""
        if self.graphs is not None:
            return [Replay(tokens)]
        b, cache = len(tokens), self.cache
        pos = [len(cache.tokens[s]) for s in range(b)]
        cache.ensure(max(pos) + 1, b)
        k = _split(pos)
        cuts = [(0, k), (k, b)] if k else [(0, b)]
        return [self._decode_rows(tokens, pos, lo, hi) for lo, hi in cuts]

    def _decode_rows(self, tokens: list[int], pos: list[int], lo: int, hi: int) -> Rows:
        n, total = hi - lo, max(pos[lo:hi]) + 1
        pos_t = self.tensor(pos[lo:hi]).view(n, 1)
        # No mask when every row sees the whole window (one sequence, or equal lengths).
        allow = None if min(pos[lo:hi]) == total - 1 else self._allow(pos_t, total)
        return Rows(self.tensor(tokens[lo:hi]).view(n, 1), pos_t, lo, total, allow, None,
                    [(s, [tokens[s]]) for s in range(lo, hi)])

    def plan_prefill(self, first: int, prompts: list[list[int]]) -> list[Rows]:
        """Rows appending ``prompts[r]`` to slot ``first + r`` (after what each holds), padded to
        one length; their logits are each row's last position's ``[n, V]``. Padding positions
        write keys/values past a slot's length, which nothing reads (every read is masked to it).
        Rows too long together for the cache's window go one prompt a group."""
        n, cache = len(prompts), self.cache
        starts = [len(cache.tokens[first + r]) for r in range(n)]
        t = max(len(p) for p in prompts)
        total = max(starts) + t
        if n > 1 and total > cache.max_len:
            return [g for r, p in enumerate(prompts) for g in self.plan_prefill(first + r, [p])]
        cache.ensure(total, first + n)
        ids = self.tensor([p + [p[-1]] * (t - len(p)) for p in prompts])
        pos = self.tensor(starts).view(n, 1) + torch.arange(t, device=self.device).view(1, t)
        last = self.tensor([r * t + len(p) - 1 for r, p in enumerate(prompts)])
        return [Rows(ids, pos, first, total, self._allow(pos, total), last,
                     [(first + r, p) for r, p in enumerate(prompts)])]

    @torch.inference_mode()
    def run(self, groups: Sequence[Group]) -> list[torch.Tensor]:
        """One forward over every group's rows (the matrix products see them all at once; each
        group attends over its own slots), a replayed graph for a ``Replay``; returns each
        group's logits (float)."""
        out: dict[int, torch.Tensor] = {}
        rows: list[tuple[int, Rows]] = []
        for i, g in enumerate(groups):
            if isinstance(g, Replay):
                assert self.graphs is not None
                out[i] = self.graphs.decode(g.tokens)
            else:
                rows.append((i, g))
        if rows:
            h = self._forward([g for _, g in rows])
            off = 0
            for i, g in rows:
                size = g.ids.numel()
                mine = h[off:off + size]
                out[i] = self._logits(mine if g.take is None else mine[g.take]).float()
                off += size
                for slot, toks in g.append:
                    self.cache.tokens[slot].extend(toks)
                    if not self.invariant:
                        self.cache.exact[slot] = False
        return [out[i] for i in range(len(groups))]

    def decode(self, tokens: list[int]) -> torch.Tensor:
        """Feed ``tokens[b]`` to slot ``b`` for b in 0..B-1; returns next-token logits ``[B, V]``."""
        return _flat(self.run(self.plan_decode(tokens)))

    def prefill_many(self, first: int, prompts: list[list[int]]) -> torch.Tensor:
        """Append ``prompts[r]`` to slot ``first + r``; returns each row's last-position logits ``[n, V]``."""
        return torch.cat(self.run(self.plan_prefill(first, prompts)))

    def prefill(self, slot: int, tokens: list[int], all_logits: bool = False) -> torch.Tensor:
        """Append ``tokens`` to slot ``slot`` (after what it already holds). Returns logits for the
        last position ``[V]``, or for every new position ``[T, V]`` when ``all_logits``."""
        [rows] = self.plan_prefill(slot, [tokens])
        if all_logits:
            rows.take = None
        logits = self.run([rows])[0]
        return logits if all_logits else logits[0]

    # -- the forward ---------------------------------------------------------------------------

    def _allow(self, pos: torch.Tensor, total: int) -> torch.Tensor:
        """``[n, 1, t, total]``: which cached positions each new position may attend to (built
        once a step for every layer)."""
        n, t = pos.shape
        return (torch.arange(total, device=self.device).view(1, 1, -1) <= pos.view(n, t, 1)).view(
            n, 1, t, total)

    def step_static(self, ids: torch.Tensor, pos: torch.Tensor, write: torch.Tensor) -> torch.Tensor:
        """A decode step whose shapes depend only on the batch bucket and the cache capacity (what
        a CUDA graph captures): ``ids``, ``pos``, ``write`` ``[B]`` on the device; row ``b`` reads
        slot ``b`` over the whole capacity under a position mask and writes its key/value to slot
        ``write[b]`` (padding rows write to the scratch slot). Returns logits ``[B, V]``."""
        b, cap = ids.shape[0], self.cache.capacity
        pos = pos.view(b, 1)
        return self._logits(self._forward([Rows(ids.view(b, 1), pos, 0, cap, self._allow(pos, cap), None, [],
                                                write=write)]))

    def _forward(self, groups: list[Rows]) -> torch.Tensor:
        """Run every group's rows, writing their keys and values to the cache, and return the
        final hidden states before the norm, ``[rows, hidden]`` in group order."""
        w, cache = self.w, self.cache
        mm = self._mm_rows if self.invariant else w.mm
        heads, kvh, hd = self.heads, self.kv_heads, self.head_dim
        qk_heads, half = heads + kvh, hd // 2
        ids, pos, slots = (_flat([f(g) for g in groups]) for f in (_ids, _pos, self._slots))
        m = ids.shape[0]
        h = F.embedding(ids, w.embed)
        cos, sin = self._rope[0][pos].view(m, 1, hd), self._rope[1][pos].view(m, 1, hd)
        # Rows of a layer's flattened [2 * (rows + 1) * kv_heads * capacity, head_dim] cache that
        # the new keys ([m, kv_heads] order) take; values sit one cache half further on.
        cap, half_rows = cache.capacity, (cache.rows + 1) * kvh * cache.capacity
        dst_k = (((slots * kvh).view(m, 1) + torch.arange(kvh, device=self.device)) * cap
                 + pos.view(m, 1)).view(-1)
        dst_v = dst_k + half_rows
        for i, lw in enumerate(w.layers):
            x = _rms(h, lw.ln_in, w.eps)
            y = mm(x, lw.qkv)
            if lw.qkv_bias is not None:
                y += lw.qkv_bias
            y = y.view(m, qk_heads + kvh, hd)
            qk = y[:, :qk_heads]
            qk = torch.addcmul(qk * cos, qk.roll(half, -1), sin)
            kv = cache.layer(i)
            flat = kv.view(-1, hd)
            flat.index_copy_(0, dst_k, qk[:, heads:].reshape(-1, hd).to(kv.dtype))
            flat.index_copy_(0, dst_v, y[:, qk_heads:].reshape(-1, hd).to(kv.dtype))
            h += mm(self._attend(qk[:, :heads], kv, groups, h.dtype), lw.o)
            gu = mm(_rms(h, lw.ln_post, w.eps), lw.gate_up)
            act = self.act(gu[..., :lw.inter])
            act *= gu[..., lw.inter:]
            h += mm(act, lw.down)
        return h

    def _attend(self, q: torch.Tensor, kv: torch.Tensor, groups: list[Rows],
                dtype: torch.dtype) -> torch.Tensor:
        """Each group's queries (``q`` ``[rows, heads, hd]``, in group order) over its slots'
        cached keys and values; ``[rows, heads * hd]``."""
        outs, off = [], 0
        attend = blocked if self.invariant else self.attend
        for g in groups:
            n, t = g.ids.shape
            allow, held = g.allow, g.total
            if self.invariant:  # whole key blocks, read from the cache (a view), the rest masked
                held = min(-(-held // KEY_BLOCK) * KEY_BLOCK, kv.shape[3])
                if allow is None and held > g.total:
                    allow = torch.ones(n, 1, t, g.total, dtype=torch.bool, device=self.device)
            keys, vals = kv[0, g.first:g.first + n, :, :held], kv[1, g.first:g.first + n, :, :held]
            if keys.dtype != dtype:
                keys, vals = keys.to(dtype), vals.to(dtype)
            o = attend(q[off:off + n * t].view(n, t, self.heads, self.head_dim), keys, vals, allow,
                       self.scale)
            outs.append(o.reshape(n * t, -1))
            off += n * t
        return _flat(outs)

    def _slots(self, g: Rows) -> torch.Tensor:
        """The slot each of the group's rows writes to, ``[n * t]``."""
        n, t = g.ids.shape
        write = g.write if g.write is not None else torch.arange(g.first, g.first + n, device=self.device)
        return write.view(n, 1).expand(n, t).reshape(-1)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        head = self._head_rows if self.invariant else self.w.logits
        return head(_rms(h, self.w.norm, self.w.eps))


def _row_blocks(mm: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``mm`` run on blocks of 2..INVARIANT_ROWS rows (a lone row is doubled), whatever the
    rows around them: each row's result is then the same alone or in a batch."""
    def run(x: torch.Tensor, *w: torch.Tensor) -> torch.Tensor:
        m = x.shape[0]
        if m == 1:
            return mm(torch.cat((x, x)), *w)[:1]
        if m <= INVARIANT_ROWS:
            return mm(x, *w)
        return torch.cat([run(x[i:i + INVARIANT_ROWS], *w) for i in range(0, m, INVARIANT_ROWS)])
    return run


def _split(pos: list[int]) -> int:
    """Where to cut the decode rows ``0..B-1`` (their lengths ``pos``) in two groups so that the
    row-positions attended, each row over its group's longest, are fewest; 0 (no cut) unless
    that saves SPLIT_SAVING."""
    b = len(pos)
    head = list(itertools.accumulate(pos, max))
    tail = list(itertools.accumulate(reversed(pos), max))[::-1]
    whole = b * head[-1]
    cost, k = min(((i * head[i - 1] + (b - i) * tail[i], i) for i in range(1, b)), default=(whole, 0))
    return k if whole - cost >= SPLIT_SAVING else 0


def _ids(g: Rows) -> torch.Tensor:
    return g.ids.reshape(-1)


def _pos(g: Rows) -> torch.Tensor:
    return g.pos.reshape(-1)


def _flat(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _rms(h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The model's RMSNorm (Llama/Mistral/Qwen2 form), inline."""
    dtype = h.dtype
    x = h if dtype == torch.float32 else h.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def _signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """rotate_half(x) * sin == roll(x, half) * [-sin[:half], sin[half:]]."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), -1)
