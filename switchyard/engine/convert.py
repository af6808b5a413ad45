"""GGUF -> safetensors folder, run as its own process (``python -m switchyard.engine.convert SRC DST``)
by ``loader.resolve_folder``: transformers dequantizes through its modeling classes, which the
engine process itself never imports (~100 MiB resident; docs/engine.md).

Writes to a temporary folder beside DST and renames it into place, so a half-written folder is never
taken for a model; when another converter got there first, its copy is kept.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path


def convert(path: Path, folder: Path) -> None:
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


if __name__ == "__main__":
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
