"""Attention over the slot KV cache: two implementations, one chosen per machine.

Both take queries ``[n, t, heads, hd]``, the cached keys and values ``[n, kv_heads, total, hd]``
(a strided view of the cache: slots are ``capacity`` positions apart) and an optional boolean
mask ``[n, 1, t, total]``, True where a query position may attend; both return ``[n, t, heads * hd]``.

* ``sdpa``: ``F.scaled_dot_product_attention(enable_gqa=True)``, torch's fused (flash) kernel.
* ``bmm``: two batched matrix products with a key head's query heads stacked as extra query
  rows (GQA without repeating keys), softmax in float32.

Which is faster depends on the CPU and torch build, by a wide margin either way: on an AMD EPYC
(avx512_bf16, no AMX) the fused kernel cost ~7 ms a call at decode sizes whatever the batch, on
a Xeon with AMX it is 1.3-3.5x faster than ``bmm`` (docs/engine.md). So ``auto`` times both once
at start-up on a decode-sized problem and keeps the faster; CUDA always takes ``sdpa``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, float], torch.Tensor]


def sdpa(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor, allow: torch.Tensor | None,
         scale: float) -> torch.Tensor:
    n, t, heads, hd = q.shape
    o = F.scaled_dot_product_attention(q.transpose(1, 2), keys, vals, attn_mask=allow, scale=scale,
                                       enable_gqa=True)
    return o.transpose(1, 2).reshape(n, t, heads * hd)


def bmm(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor, allow: torch.Tensor | None,
        scale: float) -> torch.Tensor:
    n, t, heads, hd = q.shape
    kvh, total = keys.shape[1], keys.shape[2]
    g = heads // kvh
    # queries [n * kv_heads, groups * t, hd]: a key head's query heads as extra rows
    q = q.reshape(n, t, kvh, g, hd).permute(0, 2, 3, 1, 4).reshape(n * kvh, g * t, hd)
    s = torch.bmm(q, keys.reshape(n * kvh, total, hd).transpose(1, 2)).view(n, kvh, g, t, total)
    if allow is not None:
        s.masked_fill_(~allow.view(n, 1, 1, t, total), float("-inf"))
    p = torch.softmax(s.view(n * kvh, g * t, total) * scale, -1, dtype=torch.float32)
    o = torch.bmm(p.to(q.dtype), vals.reshape(n * kvh, total, hd))
    return o.view(n, kvh, g, t, hd).permute(0, 3, 1, 2, 4).reshape(n, t, heads * hd)


IMPLEMENTATIONS: dict[str, Attend] = {"sdpa": sdpa, "bmm": bmm}

# Keys per block of ``blocked`` attention: every product it runs has this fixed inner shape.
KEY_BLOCK = 64
# The fewest rows ``blocked`` multiplies at once. Kernels choose by the row count: float32's
# products of one row differed from two or more on a Xeon, of one to three from four or more on
# an AVX-512 EPYC (measured; bfloat16's did not). Fewer rows are zero-padded up to this.
MIN_ROWS = 8


def blocked(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor, allow: torch.Tensor | None,
            scale: float) -> torch.Tensor:
    """Attention whose result for a query row depends only on that row's query and the keys it
    may see, bit for bit: not on the other rows, the number of queries or how far masked keys
    run. ``sdpa`` and ``bmm`` pick their blocking from the shapes (a decode row alone, beside
    longer rows, or as a prompt's last position gave three different results here). Keys go in
    blocks of KEY_BLOCK, each block's products have the same shape whatever the call (a key
    head's query rows, at least MIN_ROWS, times one block; only the row count varies, which
    these products do not depend on, tested), the softmax's max is exact, and the sums over
    blocks run in order (``cumsum``), so masked blocks add exact zeros. Used for steps holding
    greedy or seeded rows.

    ``keys`` may run past ``allow``'s last dim (the runner reads whole blocks from the cache, a
    view, rather than padding a copy): those positions are masked."""
    n, t, heads, hd = q.shape
    kvh, held = keys.shape[1], keys.shape[2]
    total = held if allow is None else allow.shape[-1]
    g = heads // kvh
    kb = -(-held // KEY_BLOCK)
    span = kb * KEY_BLOCK
    if held < span:
        keys, vals = F.pad(keys, (0, 0, 0, span - held)), F.pad(vals, (0, 0, 0, span - held))
    keys, vals = keys.unflatten(2, (kb, KEY_BLOCK)), vals.unflatten(2, (kb, KEY_BLOCK))
    # queries [n, kv_heads, 1, groups * t, hd]: a key head's query heads as rows, zero-padded to
    # MIN_ROWS (float32 products of fewer rows take other kernels)
    rows = g * t
    q = q.reshape(n, t, kvh, g, hd).permute(0, 2, 3, 1, 4).reshape(n, kvh, 1, rows, hd)
    pad = max(MIN_ROWS - rows, 0)
    if pad:
        q = F.pad(q, (0, 0, 0, pad))
    s = torch.matmul(q, keys.transpose(-1, -2))[:, :, :, :rows].float()  # [n, kvh, kb, rows, KB]
    if allow is None and total == span:
        see = None
    else:
        see = torch.ones(n, 1, t, total, dtype=torch.bool, device=q.device) if allow is None else allow
        see = F.pad(see, (0, span - total)).view(n, 1, t, kb, KEY_BLOCK).transpose(2, 3).unsqueeze(3)
        s = s.view(n, kvh, kb, g, t, KEY_BLOCK).masked_fill_(~see, float("-inf")).view(s.shape)
    s.mul_(scale)
    e = s.sub_(s.amax(dim=(2, 4), keepdim=True)).exp_()
    p = e.div_(e.sum(-1, keepdim=True).cumsum(2)[:, :, -1:]).to(vals.dtype)
    if pad:
        p = F.pad(p, (0, 0, 0, pad))
    o = torch.matmul(p, vals).cumsum(2, dtype=torch.float32)[:, :, -1, :rows]  # [n, kvh, rows, hd]
    return o.to(q.dtype).view(n, kvh, g, t, hd).permute(0, 3, 1, 2, 4).reshape(n, t, heads * hd)

def choose(name: str, device: torch.device, dtype: torch.dtype, heads: int, kv_heads: int,
           head_dim: int) -> str:
    """The implementation for ``name`` (``auto``, ``sdpa`` or ``bmm``) on this device."""
    if name != "auto":
        return name
    if device.type != "cpu":
        return "sdpa"
    return min(IMPLEMENTATIONS, key=lambda k: _time(IMPLEMENTATIONS[k], dtype, heads, kv_heads, head_dim))


def _time(attend: Attend, dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int) -> float:
    """Seconds for a decode step's attention of 16 rows over 256 cached positions (the best of
    a few runs, after a warm-up), read from a cache-shaped view as the runner does."""
    n, total, cap = 16, 256, 512
    gen = torch.Generator().manual_seed(0)
    cache = torch.randn(2, n, kv_heads, cap, head_dim, generator=gen).to(dtype)
    keys, vals = cache[0, :, :, :total], cache[1, :, :, :total]
    q = torch.randn(n, 1, heads, head_dim, generator=gen).to(dtype)
    allow = torch.ones(n, 1, 1, total, dtype=torch.bool)
    allow[: n // 2, ..., total // 2:] = False  # rows of different lengths
    best = float("inf")
    with torch.inference_mode():
        for _ in range(6):
            t = time.perf_counter()
            attend(q, keys, vals, allow, head_dim ** -0.5)
            best = min(best, time.perf_counter() - t)
    return best
