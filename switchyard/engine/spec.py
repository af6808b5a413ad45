"""What the engine needs to know about a model, read from its folder's ``config.json`` (and
``generation_config.json`` for the end-of-sequence ids) without transformers' configuration or
modeling classes: importing those costs ~60-100 MiB resident in the engine process (measured).

Only Llama-style decoders (llama, mistral, qwen2) and static rotary types are described; anything
else is refused here, at load, with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

SUPPORTED = frozenset({"llama", "mistral", "qwen2"})
# Rotary types whose tables depend only on the position (computed once for the whole window).
# "dynamic", "longrope" rescale with the sequence length and "yarn" is not implemented.
ROPE_TYPES = frozenset({"default", "linear", "llama3"})
# The MLP activation by ``hidden_act`` (transformers' ACT2FN names for these).
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu, "swish": F.silu, "gelu": F.gelu, "gelu_pytorch_tanh": partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
}


@dataclass(frozen=True)
class ModelSpec:
    model_type: str
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    hidden_act: str
    rope_theta: float
    rope_type: str
    rope: tuple[tuple[str, float], ...]  # the rope type's own parameters (factor, ...)
    eos_ids: tuple[int, ...]

    @property
    def act(self) -> Callable[[torch.Tensor], torch.Tensor]:
        return ACTIVATIONS[self.hidden_act]


def read_spec(folder: Path) -> ModelSpec:
    cfg = json.loads((folder / "config.json").read_text())
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED:
        raise ValueError(f"model_type {model_type!r} is not supported ({sorted(SUPPORTED)} are)")
    heads = int(cfg["num_attention_heads"])
    act = cfg.get("hidden_act", "silu")
    if act not in ACTIVATIONS:
        raise ValueError(f"hidden_act {act!r} is not supported ({sorted(ACTIVATIONS)} are)")
    theta, rope_type, rope = _rope(cfg)
    return ModelSpec(
        model_type=model_type, hidden_size=int(cfg["hidden_size"]), layers=int(cfg["num_hidden_layers"]),
        heads=heads, kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
        intermediate_size=int(cfg["intermediate_size"]), vocab_size=int(cfg["vocab_size"]),
        rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        max_position_embeddings=int(cfg["max_position_embeddings"]),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)), hidden_act=act,
        rope_theta=theta, rope_type=rope_type, rope=rope, eos_ids=_eos_ids(folder, cfg))


def _rope(cfg: dict[str, Any]) -> tuple[float, str, tuple[tuple[str, float], ...]]:
    """(theta, type, that type's parameters) from either form transformers writes: v5's
    ``rope_parameters`` or the older ``rope_theta`` + ``rope_scaling`` (``type`` or ``rope_type``)."""
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    theta = float(params.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
    legacy = params.pop("type", None)
    rope_type = params.pop("rope_type", None) or legacy or "default"
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope type {rope_type!r} is not supported ({sorted(ROPE_TYPES)} are)")
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("partial rotary embeddings are not supported")
    want = {"default": (), "linear": ("factor",),
            "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}
    missing = [k for k in want[rope_type] if k not in params]
    if missing:
        raise ValueError(f"rope type {rope_type!r} needs {missing} in config.json")
    return theta, rope_type, tuple((k, float(params[k])) for k in want[rope_type])


def _eos_ids(folder: Path, cfg: dict[str, Any]) -> tuple[int, ...]:
    """generation_config.json's ``eos_token_id`` when that file exists, else config.json's (what
    transformers' ``model.generation_config`` holds in each case)."""
    gen = folder / "generation_config.json"
    eos = json.loads(gen.read_text()).get("eos_token_id") if gen.is_file() else cfg.get("eos_token_id")
    if eos is None:
        return ()
    return tuple(int(e) for e in eos) if isinstance(eos, list) else (int(eos),)
