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

import torch
import torch.nn.functional as F

from backends.engine import rope
from backends.engine.attention import IMPLEMENTATIONS, choose
from backends.engine.cudagraph import GraphedDecode
from backends.engine.kvcache import KVCache
from backends.engine.weights import Model


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
        # On CUDA, decode steps replay captured graphs (a step is otherwise launch-bound).
        self.graphs: GraphedDecode | None = None
        if cuda_graphs and self.device.type == "cuda":
            self.graphs = GraphedDecode(self, capture=True)

    def tensor(self, data: object, dtype: torch.dtype = torch.long) -> torch.Tensor:
        return torch.tensor(data, dtype=dtype, device=self.device)

    # -- public steps -------------------------------------------------------------------------

    @torch.inference_mode()
    def decode(self, tokens: list[int]) -> torch.Tensor:
        """Feed ``tokens[b]`` to slot ``b`` for b in 0..B-1; returns next-token logits ``[B, V]``."""
        if self.graphs is not None:  # its buckets reach max_batch: every decode fits one
            return self.graphs.decode(tokens)
        b, cache = len(tokens), self.cache
        pos = [len(cache.tokens[s]) for s in range(b)]
        total = max(pos) + 1
        cache.ensure(total, b)
        pos_t = self.tensor(pos).view(b, 1)
        # No mask when every row sees the whole window (one sequence, or equal lengths).
        allow = None if min(pos) == total - 1 else self._allow(pos_t, total)
        h = self._forward(self.tensor(tokens).view(b, 1), pos_t, 0, total, allow)
        for s in range(b):
            cache.tokens[s].append(tokens[s])
        return self._logits(h[:, 0]).float()

    @torch.inference_mode()
    def prefill_many(self, first: int, prompts: list[list[int]]) -> torch.Tensor:
        """Append ``prompts[r]`` to slot ``first + r`` (after what each holds) in one padded
        forward; returns each row's last-position logits ``[n, V]``. Padding positions write
        keys/values past a slot's length, which nothing reads (every read is masked to it)."""
        n, cache = len(prompts), self.cache
        starts = [len(cache.tokens[first + r]) for r in range(n)]
        t = max(len(p) for p in prompts)
        total = max(starts) + t
        if n > 1 and total > cache.max_len:
            return torch.stack([self.prefill(first + r, p) for r, p in enumerate(prompts)])
        cache.ensure(total, first + n)
        ids = self.tensor([p + [p[-1]] * (t - len(p)) for p in prompts])
        pos = self.tensor(starts).view(n, 1) + torch.arange(t, device=self.device).view(1, t)
        h = self._forward(ids, pos, first, total, self._allow(pos, total))
        for r, p in enumerate(prompts):
            cache.tokens[first + r].extend(p)
        last = self.tensor([len(p) - 1 for p in prompts])
        return self._logits(h[torch.arange(n, device=self.device), last]).float()

    @torch.inference_mode()
    def prefill(self, slot: int, tokens: list[int], all_logits: bool = False) -> torch.Tensor:
        """Append ``tokens`` to slot ``slot`` (after what it already holds). Returns logits for the
        last position ``[V]``, or for every new position ``[T, V]`` when ``all_logits``."""
        cache = self.cache
        start, t = cache.length(slot), len(tokens)
        total = start + t
        cache.ensure(total, slot + 1)
        pos = torch.arange(start, total, device=self.device).view(1, t)
        h = self._forward(self.tensor(tokens).view(1, t), pos, slot, total, self._allow(pos, total))
        cache.tokens[slot].extend(tokens)
        return self._logits(h[0] if all_logits else h[0, -1]).float()

    # -- the forward ---------------------------------------------------------------------------

    def _allow(self, pos: torch.Tensor, total: int) -> torch.Tensor:
        """``[n, 1, t, total]``: which cached positions each new position may attend to (built
        once a step for every layer)."""
        n, t = pos.shape
        return (torch.arange(total, device=self.device).view(1, 1, -1) <= pos.view(n, t, 1)).view(
            n, 1, t, total)

    def _rotary(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin ``[n, t, 1, head_dim]`` for ``pos`` ``[n, t]``."""
        n, t = pos.shape
        cos, sin = self._rope[0][pos], self._rope[1][pos]
        return cos.view(n, t, 1, -1), sin.view(n, t, 1, -1)

    def step_static(self, ids: torch.Tensor, pos: torch.Tensor, write: torch.Tensor) -> torch.Tensor:
        """A decode step whose shapes depend only on the batch bucket and the cache capacity (what
        a CUDA graph captures): ``ids``, ``pos``, ``write`` ``[B]`` on the device; row ``b`` reads
        slot ``b`` over the whole capacity under a position mask and writes its key/value to slot
        ``write[b]`` (padding rows write to the scratch slot). Returns logits ``[B, V]``."""
        b, cap = ids.shape[0], self.cache.capacity
        pos = pos.view(b, 1)
        h = self._forward(ids.view(b, 1), pos, 0, cap, self._allow(pos, cap), write)
        return self._logits(h[:, 0])

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, first: int, total: int,
                 allow: torch.Tensor | None, write: torch.Tensor | None = None) -> torch.Tensor:
        """Run ``ids`` ``[n, t]`` at positions ``pos`` for slots ``first..first+n-1``, writing their
        keys and values to the cache (to slots ``write`` ``[n]`` when given) and attending over
        ``total`` positions; returns the final hidden states before the norm ``[n, t, hidden]``."""
        n, t = ids.shape
        w, cache = self.w, self.cache
        heads, kvh, hd = self.heads, self.kv_heads, self.head_dim
        qk_heads, half = heads + kvh, hd // 2
        h = F.embedding(ids, w.embed)
        cos, sin = self._rotary(pos)
        # Rows of a layer's flattened [2 * (rows + 1) * kv_heads * capacity, head_dim] cache that
        # the new keys ([n, kv_heads, t] order) take; values sit one cache half further on.
        cap, half_rows = cache.capacity, (cache.rows + 1) * kvh * cache.capacity
        if write is None:
            write = torch.arange(first, first + n, device=self.device)
        slot_head = (write * kvh).view(n, 1, 1) + torch.arange(kvh, device=self.device).view(1, kvh, 1)
        dst_k = (slot_head * cap + pos.view(n, 1, t)).view(-1)
        dst_v = dst_k + half_rows
        for i, lw in enumerate(w.layers):
            x = _rms(h, lw.ln_in, w.eps)
            y = w.mm(x, lw.qkv)
            if lw.qkv_bias is not None:
                y += lw.qkv_bias
            y = y.view(n, t, qk_heads + kvh, hd)
            qk = y[:, :, :qk_heads]
            qk = torch.addcmul(qk * cos, qk.roll(half, -1), sin)
            kv = cache.layer(i)
            flat = kv.view(-1, hd)
            flat.index_copy_(0, dst_k, qk[:, :, heads:].transpose(1, 2).reshape(-1, hd).to(kv.dtype))
            flat.index_copy_(0, dst_v, y[:, :, qk_heads:].transpose(1, 2).reshape(-1, hd).to(kv.dtype))
            keys, vals = kv[0, first:first + n, :, :total], kv[1, first:first + n, :, :total]
            if keys.dtype != h.dtype:
                keys, vals = keys.to(h.dtype), vals.to(h.dtype)
            o = self.attend(qk[:, :, :heads], keys, vals, allow, self.scale)
            h += w.mm(o, lw.o)
            gu = w.mm(_rms(h, lw.ln_post, w.eps), lw.gate_up)
            act = self.act(gu[..., :lw.inter])
            act *= gu[..., lw.inter:]
            h += w.mm(act, lw.down)
        return h

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.w.logits(_rms(h, self.w.norm, self.w.eps))


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
