"""The engine's own weight layout, built straight from the tensors of a Llama-style checkpoint.

Per layer one q/k/v matrix and one gate/up matrix (fewer, larger products), plus o and down.
Each is stored the way the device multiplies it fastest (``Layout``, measured in docs/engine.md):
on CPU packed once into oneDNN's blocked format (what ``F.linear`` otherwise reorders on every
call in bfloat16; in float32 oneDNN's kernels also beat MKL's sgemm, 1.4-1.9x a step on an AVX2
EPYC), on CUDA the natural ``[out, in]`` with ``F.linear``. No matrix exists twice: the fused
ones replace their parts, and a tied input embedding is the lm_head's storage (so the head keeps
the natural layout the lookup reads: never packed; on CPU in float32 oneDNN multiplies it as it
is, 1.9x MKL's product at 32 rows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from switchyard.engine.spec import ModelSpec

# Stored by some older checkpoints; recomputed by rope.py, so not a weight.
IGNORED_SUFFIX = "rotary_emb.inv_freq"


@dataclass(frozen=True)
class Layout:
    """How the matrices are stored (``store`` takes ``[out, in]``) and multiplied (``mm(x, w)``)."""

    store: Callable[[torch.Tensor], torch.Tensor]
    mm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _packed_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")


# The batch size oneDNN picks the blocked format for; at 1, 32 and 64 rows it was as fast as or
# faster than packing for 1 (measured on SmolLM2's matrices).
PACK_ROWS = 32

NATURAL = Layout(lambda w: w.contiguous(), F.linear)
PACKED = Layout(lambda w: torch.ops.mkldnn._reorder_linear_weight(w.contiguous(), PACK_ROWS),
                _packed_linear)
# the natural matrix, multiplied by oneDNN as it is (no reorder in float32)
ONEDNN = Layout(NATURAL.store, _packed_linear)


def layout_for(device: torch.device, dtype: torch.dtype) -> tuple[Layout, Layout]:
    """The layers' layout and the lm_head's, for this device and dtype."""
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return NATURAL, NATURAL
    if dtype == torch.float32:
        return PACKED, ONEDNN
    # oneDNN's bfloat16 kernels need avx512 (bw/vl/dq) or avx_ne_convert; elsewhere F.linear
    if dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return PACKED, NATURAL
    return NATURAL, NATURAL


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
    def __init__(self, state: dict[str, torch.Tensor], spec: ModelSpec, layout: Layout,
                 head_layout: Layout = NATURAL) -> None:
        """Takes the tensors it uses out of ``state`` (names as transformers saves them, already in
        the engine's dtype and on its device), so each original is freed once fused. The lm_head
        keeps its rows (``head_layout`` stores ``[out, in]``): a tied embedding reads them."""
        self.layout = layout
        self.mm = layout.mm  # the layers' products
        self.head_layout = head_layout
        self.norm = _take(state, "model.norm.weight")
        self.device, self.dtype = self.norm.device, self.norm.dtype
        self.eps = spec.rms_eps
        self.layers: list[Layer] = []
        for i in range(spec.layers):
            p = f"model.layers.{i}."

            def take(name: str, prefix: str = p) -> torch.Tensor:
                return _take(state, prefix + name)

            qkv_bias = None
            if p + "self_attn.q_proj.bias" in state:  # qwen2; partial biases fail in take / below
                qkv_bias = torch.cat([take(f"self_attn.{x}_proj.bias") for x in "qkv"])
            gate = take("mlp.gate_proj.weight")
            self.layers.append(Layer(
                ln_in=take("input_layernorm.weight"),
                qkv=self._fuse([take(f"self_attn.{x}_proj.weight") for x in "qkv"]), qkv_bias=qkv_bias,
                o=self._fuse([take("self_attn.o_proj.weight")]),
                ln_post=take("post_attention_layernorm.weight"),
                gate_up=self._fuse([gate, take("mlp.up_proj.weight")]),
                down=self._fuse([take("mlp.down_proj.weight")]), inter=gate.shape[0]))
            del gate
        head = state.pop("lm_head.weight", None)
        embed = state.pop("model.embed_tokens.weight", None)
        if spec.tie_word_embeddings:  # one matrix: the embedding when stored (as transformers ties)
            head, embed = (embed if embed is not None else head), None
        elif embed is None:
            raise ValueError("weights missing: model.embed_tokens.weight")
        if head is None:
            raise ValueError("weights missing: lm_head.weight")
        self.head = self._fuse([head], self.head_layout)
        del head
        self.embed = embed if embed is not None else self.head  # tied: the lookup gathers its rows
        unused = [n for n in state if not n.endswith(IGNORED_SUFFIX)]
        if unused:  # o/MLP/head biases, partial q/k/v biases, other architectures' tensors
            raise ValueError(f"unsupported tensors in the checkpoint: {unused[:5]}")

    def _fuse(self, parts: list[torch.Tensor], layout: Layout | None = None) -> torch.Tensor:
        """The matrices concatenated along the output dim, stored in ``layout`` (the layers')."""
        w = parts[0] if len(parts) == 1 else torch.cat(parts)
        parts.clear()
        return (layout or self.layout).store(w)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """The lm_head's product."""
        return self.head_layout.mm(h, self.head)


@dataclass
class Model:
    """What the engine runs: the description, the weights and the folder they came from."""

    spec: ModelSpec
    weights: Weights
    folder: Path


def _take(state: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    try:
        return state.pop(name)
    except KeyError:
        raise ValueError(f"weights missing: {name}") from None
