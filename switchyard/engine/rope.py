"""Rotary cos/sin tables for every position of the window, computed as transformers'
``LlamaRotaryEmbedding`` and ``modeling_rope_utils`` compute them (same ops in the same order, so
the same values) without importing either: the rope utilities want a transformers config object,
and the config classes alone cost ~60 MiB resident (measured). The three supported types
(``spec.ROPE_TYPES``) all have an attention scaling of 1.0, so cos/sin are not rescaled.
"""

from __future__ import annotations

import math

import torch

from switchyard.engine.spec import ModelSpec


def inv_freq(spec: ModelSpec) -> torch.Tensor:
    """The inverse frequencies ``[head_dim / 2]`` in float32 on the CPU (where transformers builds them)."""
    dim, p = spec.head_dim, dict(spec.rope)
    inv = 1.0 / (spec.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    if spec.rope_type == "linear":
        inv /= p["factor"]
    elif spec.rope_type == "llama3":
        factor, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
        old_context = p["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_context / low, old_context / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old_context / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def tables(spec: ModelSpec, max_len: int, device: torch.device,
           dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[max_len, head_dim]`` in ``dtype`` on ``device``."""
    inv = inv_freq(spec).to(device)
    pos = torch.arange(max_len, device=device)
    freqs = pos[:, None].float() * inv.float()
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)
