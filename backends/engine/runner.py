"""One forward pass for many sequences over the slot KV cache.

For Llama-style decoders (llama, mistral, qwen2: pre-norm, rotary, GQA, gated MLP) the layers
are driven directly from the loaded transformers modules with our own cache layout: a decode
step feeds one token per active slot, attends over a view of the cache and costs a few hundred
torch ops, instead of ``generate()``'s per-step framework work (cache objects, mask builders,
logits processors, stopping criteria).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from backends.engine.kvcache import KVCache

SUPPORTED = frozenset({"llama", "mistral", "qwen2"})
PACKED_HEAD_ROWS = 3


class Runner:
    def __init__(self, model: torch.nn.Module, slots: int, max_len: int, kv_dtype: torch.dtype) -> None:
        cfg = model.config
        if cfg.model_type not in SUPPORTED:
            raise ValueError(f"model_type {cfg.model_type!r} is not supported ({sorted(SUPPORTED)} are)")
        self.model = model
        inner = model.model
        self.embed = inner.embed_tokens
        self.layers = list(inner.layers)
        self.norm = inner.norm
        self.rotary = inner.rotary_emb
        self.lm_head = model.lm_head
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scale = self.layers[0].self_attn.scaling
        self.vocab_size = cfg.vocab_size
        self.cache = KVCache(len(self.layers), slots, self.kv_heads, self.head_dim, max_len, kv_dtype)
        self._fuse()
        self._head()
        rope_type = getattr(self.rotary, "rope_type", "default")
        # Static rotary types: cos/sin for every position, computed once by the model's own
        # module (same ops, same values); dynamic ones depend on the length and run per step.
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None
        if rope_type not in ("dynamic", "longrope"):
            with torch.inference_mode():
                probe = torch.zeros(1, dtype=next(model.parameters()).dtype)
                cos, sin = self.rotary(probe, torch.arange(max_len).view(1, -1))
                half = self.head_dim // 2
                # rotate_half(x) * sin == roll(x, half) * [-sin[:half], sin[half:]]
                self._rope = (cos[0].contiguous(), torch.cat((-sin[0, :, :half], sin[0, :, half:]), -1))

    def _fuse(self) -> None:
        """Per layer one ``[hidden, q+k+v]`` and one ``[hidden, gate+up]`` weight, and ``o``/``down``,
        all stored transposed (``[in, out]``, contiguous): a decode step multiplies a few rows by
        them, and MKL's small-M path is markedly faster on this layout. The modules' weights become
        views into these tensors, so ``model(...)`` and prefill keep working with no second copy."""
        self.fused: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor,
                               torch.Tensor, int]] = []
        for layer in self.layers:
            attn, mlp = layer.self_attn, layer.mlp
            projs = (attn.q_proj, attn.k_proj, attn.v_proj)
            bias = None
            if all(p.bias is not None for p in projs):
                bias = torch.cat([p.bias.detach() for p in projs])
            elif any(p.bias is not None for p in projs):
                raise ValueError("q/k/v projections with partial biases are not supported")
            if any(m.bias is not None for m in (attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)):
                raise ValueError("o_proj / MLP biases are not supported")
            qkv = _transposed(list(projs))
            gu = _transposed([mlp.gate_proj, mlp.up_proj])
            o, down = _transposed([attn.o_proj]), _transposed([mlp.down_proj])
            if bias is not None:
                start = 0
                for p in projs:
                    n = p.bias.shape[0]
                    p.bias = torch.nn.Parameter(bias[start:start + n], requires_grad=False)
                    start += n
            self.fused.append((qkv, bias, o, gu, down, mlp.gate_proj.weight.shape[0]))

    def _head(self) -> None:
        """The output projection stored transposed (a tied input embedding shares it: its lookup
        gathers columns), plus a oneDNN copy for 3+ rows: over a 49k vocabulary MKL's small-M
        sgemm is ~1.7x slower than oneDNN there, while for one or two rows the transposed
        matrix-vector product is the fastest."""
        head = self.lm_head
        tied = self.embed.weight is head.weight
        if head.bias is not None:
            raise ValueError("lm_head bias is not supported")
        self.head_t = _transposed([head])
        if tied:
            self.embed.weight = head.weight
        self.head_packed: torch.Tensor | None = None
        if self.head_t.dtype == torch.float32 and torch.backends.mkldnn.is_available():
            self.head_packed = self.head_t.t().contiguous().to_mkldnn()

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        if self.head_packed is not None and x.shape[0] >= PACKED_HEAD_ROWS:
            return torch._C._nn.mkldnn_linear(x.to_mkldnn(), self.head_packed, None).to_dense()
        return x @ self.head_t

    @torch.inference_mode()
    def decode(self, tokens: list[int]) -> torch.Tensor:
        """Feed ``tokens[b]`` to slot ``b`` for b in 0..B-1; returns next-token logits ``[B, V]``."""
        b = len(tokens)
        cache = self.cache
        pos = [len(cache.tokens[s]) for s in range(b)]
        max_len = max(pos) + 1
        cache.ensure(max_len)
        heads, kvh, hd = self.heads, self.kv_heads, self.head_dim
        gqa = heads != kvh
        pos_t = torch.tensor(pos)
        # Where each row's new key/value goes in a layer's flattened [slots*kv_heads*capacity, hd].
        cap = cache.capacity
        dst = ((torch.arange(b) * kvh).view(b, 1) + torch.arange(kvh).view(1, kvh)) * cap + pos_t.view(b, 1)
        dst = dst.view(-1)
        # No mask when every row sees the whole window (one sequence, or equal lengths).
        mask = None
        if min(pos) != max_len - 1:
            mask = (torch.arange(max_len).view(1, -1) <= pos_t.view(-1, 1)).view(b, 1, 1, max_len)
        h = self.embed(torch.tensor(tokens))  # [b, hidden]
        if self._rope is not None:
            cos, sin = self._rope[0][pos_t].view(b, 1, hd), self._rope[1][pos_t].view(b, 1, hd)
        else:
            cos, sin = self.rotary(h, pos_t.view(b, 1))
            half = hd // 2
            cos, sin = cos.view(b, 1, hd), torch.cat((-sin[..., :half], sin[..., half:]), -1).view(b, 1, hd)
        qk_heads = heads + kvh
        half = hd // 2
        for i, layer in enumerate(self.layers):
            mlp = layer.mlp
            qkv_w, qkv_b, o_w, gu_w, down_w, inter = self.fused[i]
            x = _rms(h, layer.input_layernorm)
            y = (x @ qkv_w if qkv_b is None else x @ qkv_w + qkv_b).view(b, qk_heads + kvh, hd)
            qk = y[:, :qk_heads]
            qk = qk * cos + qk.roll(half, -1) * sin
            kc, vc = cache.k[i], cache.v[i]
            kc.view(-1, hd).index_copy_(0, dst, qk[:, heads:].reshape(-1, hd).to(kc.dtype))
            vc.view(-1, hd).index_copy_(0, dst, y[:, qk_heads:].reshape(-1, hd).to(vc.dtype))
            keys, vals = kc[:b, :, :max_len], vc[:b, :, :max_len]
            if keys.dtype != qk.dtype:
                keys, vals = keys.to(qk.dtype), vals.to(qk.dtype)
            q = qk[:, :heads].view(b, heads, 1, hd)
            o = F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask, scale=self.scale,
                                               enable_gqa=gqa)
            h = h + o.reshape(b, heads * hd) @ o_w
            gu = _rms(h, layer.post_attention_layernorm) @ gu_w
            h = h + (mlp.act_fn(gu[:, :inter]) * gu[:, inter:]) @ down_w
        for s in range(b):
            cache.tokens[s].append(tokens[s])
        return self._logits(_rms(h, self.norm)).float()

    @torch.inference_mode()
    def prefill_many(self, first: int, prompts: list[list[int]]) -> torch.Tensor:
        """Append ``prompts[r]`` to slot ``first + r`` (after what each holds) in one padded
        forward; returns each row's last-position logits ``[n, V]``. Padding positions write
        keys/values past a slot's length, which nothing reads (every read is masked to it)."""
        n, cache = len(prompts), self.cache
        starts = [len(cache.tokens[first + r]) for r in range(n)]
        t = max(len(p) for p in prompts)
        total = max(starts) + t
        if n == 1 or total > cache.max_len or first + n > cache.slots:
            return torch.stack([self.prefill(first + r, p) for r, p in enumerate(prompts)])
        cache.ensure(total)
        heads, kvh, hd, cap = self.heads, self.kv_heads, self.head_dim, cache.capacity
        ids = torch.tensor([p + [p[-1]] * (t - len(p)) for p in prompts])
        pos = torch.tensor(starts).view(n, 1) + torch.arange(t).view(1, t)  # [n, t]
        mask = (torch.arange(total).view(1, 1, -1) <= pos.view(n, t, 1)).view(n, 1, t, total)
        # destination rows in a layer's flattened cache, ordered [n, kv_heads, t]
        base = (torch.arange(first, first + n) * kvh).view(n, 1, 1) + torch.arange(kvh).view(1, kvh, 1)
        dst = (base * cap + pos.view(n, 1, t)).view(-1)
        h = self.embed(ids)  # [n, t, hidden]
        half = hd // 2
        if self._rope is not None:
            cos, sin = self._rope[0][pos].view(n, t, 1, hd), self._rope[1][pos].view(n, t, 1, hd)
        else:
            cos, sin = self.rotary(h, pos)
            sin = torch.cat((-sin[..., :half], sin[..., half:]), -1)
            cos, sin = cos.view(n, t, 1, hd), sin.view(n, t, 1, hd)
        qk_heads = heads + kvh
        for i, layer in enumerate(self.layers):
            mlp = layer.mlp
            qkv_w, qkv_b, o_w, gu_w, down_w, inter = self.fused[i]
            x = _rms(h, layer.input_layernorm)
            y = (x @ qkv_w if qkv_b is None else x @ qkv_w + qkv_b).view(n, t, qk_heads + kvh, hd)
            qk = y[:, :, :qk_heads]
            qk = qk * cos + qk.roll(half, -1) * sin
            kc, vc = cache.k[i], cache.v[i]
            k, v = qk[:, :, heads:].transpose(1, 2), y[:, :, qk_heads:].transpose(1, 2)
            kc.view(-1, hd).index_copy_(0, dst, k.reshape(-1, hd).to(kc.dtype))
            vc.view(-1, hd).index_copy_(0, dst, v.reshape(-1, hd).to(vc.dtype))
            keys, vals = kc[first:first + n, :, :total], vc[first:first + n, :, :total]
            if keys.dtype != qk.dtype:
                keys, vals = keys.to(qk.dtype), vals.to(qk.dtype)
            q = qk[:, :, :heads].transpose(1, 2)
            o = F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask, scale=self.scale,
                                               enable_gqa=heads != kvh)
            h = h + o.transpose(1, 2).reshape(n, t, heads * hd) @ o_w
            gu = _rms(h, layer.post_attention_layernorm) @ gu_w
            h = h + (mlp.act_fn(gu[..., :inter]) * gu[..., inter:]) @ down_w
        for r, p in enumerate(prompts):
            cache.tokens[first + r].extend(p)
        last = torch.tensor([len(p) - 1 for p in prompts])
        return self._logits(_rms(h[torch.arange(n), last], self.norm)).float()

    @torch.inference_mode()
    def prefill(self, slot: int, tokens: list[int], all_logits: bool = False) -> torch.Tensor:
        """Append ``tokens`` to slot ``slot`` (after what it already holds). Returns logits for the
        last position ``[V]``, or for every new position ``[T, V]`` when ``all_logits``."""
        cache = self.cache
        start, t = cache.length(slot), len(tokens)
        total = start + t
        cache.ensure(total)
        ids = torch.tensor(tokens).view(1, t)
        positions = torch.arange(start, total).view(1, t)
        mask = (torch.arange(total).view(1, -1) <= positions.view(-1, 1)).view(1, 1, t, total)
        h = self.embed(ids)
        cos, sin = self.rotary(h, positions)
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(1, t, self.heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(1, t, self.kv_heads, self.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(1, t, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            kc, vc = cache.k[i], cache.v[i]
            kc[slot, :, start:total] = k[0].to(kc.dtype)
            vc[slot, :, start:total] = v[0].to(vc.dtype)
            keys, vals = kc[slot:slot + 1, :, :total], vc[slot:slot + 1, :, :total]
            if keys.dtype != q.dtype:
                keys, vals = keys.to(q.dtype), vals.to(q.dtype)
            o = F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask, scale=self.scale,
                                               enable_gqa=self.heads != self.kv_heads)
            h = h + attn.o_proj(o.transpose(1, 2).reshape(1, t, self.heads * self.head_dim))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        cache.tokens[slot].extend(tokens)
        h = self.norm(h[0] if all_logits else h[0, -1])
        return self.lm_head(h).float()


def _rms(h: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
    """The model's RMSNorm (Llama/Mistral/Qwen2 form), inline."""
    dtype = h.dtype
    x = h if dtype == torch.float32 else h.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * x.to(dtype)


def _transposed(mods: list[torch.nn.Module]) -> torch.Tensor:
    """The modules' weights concatenated along the output dim, stored ``[in, out]``; each module's
    weight is replaced by its (transposed) view."""
    w = torch.cat([m.weight.detach() for m in mods]).t().contiguous()
    start = 0
    for m in mods:
        n = m.weight.shape[0]
        m.weight = torch.nn.Parameter(w[:, start:start + n].t(), requires_grad=False)
        start += n
    return w

