"""The engine's own weight layout, taken from a loaded Llama-style transformers model.

Per layer one q/k/v matrix and one gate/up matrix (fewer, larger products), plus o and down.
The layout follows what the device multiplies fastest: on CPU in float32, MKL's small-M sgemm is
~1.5x faster on ``[in, out]`` (transposed, used as ``x @ w``); in bfloat16 (oneDNN, avx512_bf16)
and on CUDA the natural ``[out, in]`` with ``F.linear`` is the fast one (measured in
docs/engine.md). The modules' own weights become views into these tensors, so ``model(...)``
keeps working and no matrix exists twice; a tied input embedding shares the lm_head's storage.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Layer:
    ln_in: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    ln_post: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    inter: int  # the gate's width (gate_up = [gate | up])


class Weights:
    def __init__(self, model: torch.nn.Module, transposed: bool) -> None:
        self.transposed = transposed
        inner = model.model
        self.layers: list[Layer] = []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            projs = [attn.q_proj, attn.k_proj, attn.v_proj]
            if any(m.bias is not None for m in (attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)):
                raise ValueError("o_proj / MLP biases are not supported")
            self.layers.append(Layer(
                ln_in=layer.input_layernorm.weight.detach(),
                qkv=self._fuse(projs), qkv_bias=_fuse_bias(projs), o=self._fuse([attn.o_proj]),
                ln_post=layer.post_attention_layernorm.weight.detach(),
                gate_up=self._fuse([mlp.gate_proj, mlp.up_proj]), down=self._fuse([mlp.down_proj]),
                inter=mlp.gate_proj.weight.shape[0]))
        self.norm = inner.norm.weight.detach()
        self.eps = float(inner.norm.variance_epsilon)
        head, embed = model.lm_head, inner.embed_tokens
        if head.bias is not None:
            raise ValueError("lm_head bias is not supported")
        tied = embed.weight is head.weight
        self.head = self._fuse([head])
        if tied:
            embed.weight = head.weight  # a view of self.head: the lookup gathers its rows/columns
        self.embed = embed.weight.detach()

    def _fuse(self, mods: list[torch.nn.Module]) -> torch.Tensor:
        """The modules' weights concatenated along the output dim in this layout; each module's
        weight becomes a view of its part."""
        if len(mods) == 1 and not self.transposed and mods[0].weight.is_contiguous():
            return mods[0].weight.detach()  # already in place: no copy
        w = torch.cat([m.weight.detach() for m in mods])
        if self.transposed:
            w = w.t().contiguous()
        start = 0
        for m in mods:
            n = m.weight.shape[0]
            part = w[:, start:start + n].t() if self.transposed else w[start:start + n]
            m.weight = torch.nn.Parameter(part, requires_grad=False)
            start += n
        return w

    def mm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w if self.transposed else F.linear(x, w)


def _fuse_bias(projs: list[torch.nn.Module]) -> torch.Tensor | None:
    if all(p.bias is None for p in projs):
        return None
    if any(p.bias is None for p in projs):
        raise ValueError("q/k/v projections with partial biases are not supported")
    bias = torch.cat([p.bias.detach() for p in projs])
    start = 0
    for p in projs:
        n = p.bias.shape[0]
        p.bias = torch.nn.Parameter(bias[start:start + n], requires_grad=False)
        start += n
    return bias


def prefer_transposed(device: torch.device, dtype: torch.dtype) -> bool:
    return device.type == "cpu" and dtype == torch.float32
