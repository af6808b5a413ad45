"""The engine's model description and rotary tables, read without transformers' model classes,
checked against what transformers itself builds from the same config.json."""

from __future__ import annotations

import json

import pytest
import torch

from switchyard.engine import rope
from switchyard.engine.spec import read_spec

BASE = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 400, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 512, "tie_word_embeddings": True, "hidden_act": "silu", "eos_token_id": 7}
ROPES = [
    {"rope_parameters": {"rope_type": "default", "rope_theta": 100000.0}},
    {"rope_theta": 500000.0},  # the older form: no scaling
    {"rope_theta": 10000.0, "rope_scaling": {"type": "linear", "factor": 4.0}},
    {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 128}},
]


def write(folder, **cfg):
    (folder / "config.json").write_text(json.dumps({**BASE, **cfg}))
    return folder


@pytest.mark.parametrize("extra", ROPES, ids=["default", "theta-only", "linear", "llama3"])
def test_rotary_tables_equal_transformers(tmp_path, extra):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    spec = read_spec(write(tmp_path, **extra))
    cos, sin = rope.tables(spec, 512, torch.device("cpu"), torch.float32)
    hf = LlamaRotaryEmbedding(LlamaConfig.from_pretrained(tmp_path))
    ref_cos, ref_sin = hf(torch.zeros(1), torch.arange(512).view(1, -1))
    assert torch.equal(cos, ref_cos[0]) and torch.equal(sin, ref_sin[0])


def test_spec_fields_and_eos(tmp_path):
    spec = read_spec(write(tmp_path, head_dim=32))
    assert (spec.heads, spec.kv_heads, spec.head_dim, spec.layers, spec.rms_eps) == (4, 2, 32, 2, 1e-5)
    assert spec.eos_ids == (7,)  # no generation_config.json: config.json's
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [3, 9]}))
    assert read_spec(tmp_path).eos_ids == (3, 9)


@pytest.mark.parametrize("bad, match", [
    ({"model_type": "gpt2"}, "model_type 'gpt2' is not supported"),
    ({"hidden_act": "tanh"}, "hidden_act 'tanh' is not supported"),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope type 'dynamic' is not supported"),
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}, "rope type 'longrope'"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}, "rope type 'yarn'"),
    ({"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4}}, r"needs \['factor'\]"),
])
def test_unsupported_models_are_refused_at_load(tmp_path, bad, match):
    with pytest.raises(ValueError, match=match):
        read_spec(write(tmp_path, **bad))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # each dtype's layout
def test_untied_qwen2_with_qkv_biases_matches_transformers(tmp_path, dtype):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from switchyard.engine.loader import load_model
    from switchyard.engine.runner import Runner

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    hf = Qwen2ForCausalLM(cfg)
    for layer in hf.model.layers:  # non-zero biases, so leaving them out would show
        torch.nn.init.normal_(layer.self_attn.q_proj.bias)
        torch.nn.init.normal_(layer.self_attn.k_proj.bias)
    hf.save_pretrained(tmp_path)
    model = load_model(tmp_path, dtype, torch.device("cpu"))
    assert model.spec.model_type == "qwen2" and model.weights.layers[0].qkv_bias is not None
    ids = [5, 17, 42, 99, 3, 250, 8]
    got = Runner(model, slots=1, max_len=32, kv_dtype=dtype).prefill(0, ids, all_logits=True)
    ref_model = Qwen2ForCausalLM.from_pretrained(tmp_path, dtype=dtype).eval()
    with torch.inference_mode():
        ref = ref_model(torch.tensor([ids])).logits[0].float()
    tol = 1e-4 if dtype == torch.float32 else 0.1
    torch.testing.assert_close(got, ref, atol=tol, rtol=tol)


def test_a_failed_gguf_conversion_is_reported_and_leaves_no_folder(tmp_path):
    """The conversion runs in a child process; its failure comes back as the load's error."""
    from switchyard.core.deployments import EngineConfig
    from switchyard.engine.loader import resolve_folder

    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf file")
    cache = tmp_path / "cache"
    with pytest.raises(RuntimeError, match=r"converting .*broken\.gguf failed"):
        resolve_folder(EngineConfig(path=str(bad), cache_dir=str(cache)))
    assert not any(p.is_dir() for p in cache.iterdir())  # no folder; only the digest index


def test_a_gguf_is_converted_once_whatever_its_path(tmp_path):
    """The converted copy is named by the GGUF's content: a second checkout (another path, another
    mtime) of the same file finds it; a file with other content gets its own; the digest is
    remembered so a later start does not read the file again."""
    import os
    import shutil

    from switchyard.core.deployments import EngineConfig
    from switchyard.engine.loader import DIGESTS, converted_folder, resolve_folder

    cache = tmp_path / "cache"
    first = tmp_path / "checkout-a" / "m.gguf"
    first.parent.mkdir()
    first.write_bytes(os.urandom(1 << 20))
    folder = converted_folder(first, cache)
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"")  # as a finished conversion leaves it
    second = tmp_path / "checkout-b" / "m.gguf"
    second.parent.mkdir()
    shutil.copyfile(first, second)
    os.utime(second, ns=(1, 1))
    assert resolve_folder(EngineConfig(path=str(second), cache_dir=str(cache))) == folder
    assert resolve_folder(EngineConfig(path=str(first), cache_dir=str(cache))) == folder
    assert len(list(cache.iterdir())) == 2  # the one folder and the digest index
    other = tmp_path / "checkout-c" / "m.gguf"
    other.parent.mkdir()
    other.write_bytes(os.urandom(1 << 20))
    assert converted_folder(other, cache) != folder
    assert len(__import__("json").loads((cache / DIGESTS).read_text())) == 3
    # A remembered digest is used as long as the file is unchanged (path, size, mtime, inode).
    first.chmod(0)  # unreadable: hashing it again would fail
    try:
        assert converted_folder(first, cache) == folder
    finally:
        first.chmod(0o644)
