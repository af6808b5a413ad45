"""A proxy-only install has no torch: the engine package must import without it."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_package_does_not_import_torch():
    code = "import sys, switchyard.engine; assert 'torch' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_the_engine_process_imports_no_transformers_modeling_code(tiny_dir):
    """Loading the model and building the engine in a fresh interpreter (as the engine process does)
    leaves every ``transformers.models.*.modeling_*`` module, and the modeling base, unimported."""
    code = f"""
import sys, torch
from switchyard.engine.loader import load
from switchyard.engine.scheduler import Engine
from switchyard.core.deployments import EngineConfig
loaded = load(EngineConfig(path={str(tiny_dir)!r}, threads=1))
engine = Engine(loaded.model, loaded.tokenizer, lambda msg: None, max_batch=2)
assert engine.runner.prefill(0, loaded.tokenizer.encode("Hello")).shape == (loaded.model.spec.vocab_size,)
print([m for m in sys.modules if m.startswith("transformers.models.") and ".modeling_" in m
       or m == "transformers.modeling_utils"])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
