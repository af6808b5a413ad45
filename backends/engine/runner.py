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

    @torch.inference_mode()
    def decode(self, tokens: list[int]) -> torch.Tensor:
        """Feed ``tokens[b]`` to slot ``b`` for b in 0..B-1; returns next-token logits ``[B, V]``."""
        b = len(tokens)
        cache = self.cache
        pos = [cache.length(s) for s in range(b)]
        max_len = max(pos) + 1
        cache.ensure(max_len)
        pos_t = torch.tensor(pos)
        ids = torch.tensor(tokens).view(b, 1)
        rows = torch.arange(b)
        mask = (torch.arange(max_len).view(1, -1) <= pos_t.view(-1, 1)).view(b, 1, 1, max_len)
        h = self.embed(ids)
        cos, sin = self.rotary(h, pos_t.view(b, 1))
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(b, 1, self.heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(b, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(b, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            kc, vc = cache.k[i], cache.v[i]
            kc[rows, :, pos_t] = k[:, :, 0].to(kc.dtype)
            vc[rows, :, pos_t] = v[:, :, 0].to(vc.dtype)
            keys, vals = kc[:b, :, :max_len], vc[:b, :, :max_len]
            if keys.dtype != q.dtype:
                keys, vals = keys.to(q.dtype), vals.to(q.dtype)
            o = F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask, scale=self.scale,
                                               enable_gqa=self.heads != self.kv_heads)
            h = h + attn.o_proj(o.transpose(1, 2).reshape(b, 1, self.heads * self.head_dim))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        for s in range(b):
            cache.tokens[s].append(tokens[s])
        return self.lm_head(self.norm(h[:, 0])).float()

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
