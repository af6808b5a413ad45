"""engine.device / engine.dtype plumbing, checked with the CPU device (the suite runs without a
GPU): config validation, resolution, and every tensor of the model and the runner on the model's
device, with no second copy of any matrix."""

from __future__ import annotations

import pydantic
import pytest
import torch

from backends.engine.loader import cpu_has_bf16, load, resolve_device, resolve_dtype
from backends.engine.runner import Runner
from gateway.config import EngineConfig


def test_config_validates_device_dtype_and_chunk():
    assert EngineConfig().device == "auto"
    for bad in ({"device": "gpu"}, {"dtype": "float16"}, {"prefill_chunk": 0}):
        with pytest.raises(pydantic.ValidationError) as e:
            EngineConfig(**bad)
        assert next(iter(bad)) in str(e.value)


def test_device_and_dtype_resolution():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if torch.cuda.is_available():
        assert resolve_device("cuda").type == "cuda"
    else:
        with pytest.raises(RuntimeError, match="no GPU"):
            resolve_device("cuda")
    assert resolve_dtype("float32", torch.device("cpu")) == "float32"
    assert resolve_dtype("auto", torch.device("cpu")) == ("bfloat16" if cpu_has_bf16() else "float32")
    assert resolve_dtype("auto", torch.device("cuda")) == "bfloat16"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_everything_on_the_models_device_and_stored_once(tiny_dir, dtype):
    loaded = load(EngineConfig(path=str(tiny_dir), device="cpu", dtype=dtype, threads=1))
    model = loaded.model
    want = (torch.device("cpu"), getattr(torch, dtype))
    assert {(p.device, p.dtype) for p in model.parameters()} == {want}
    r = Runner(model, slots=2, max_len=64, kv_dtype=want[1])
    tensors = [r.cache.kv, r.w.embed, r.w.head, r.w.norm, *r._rope]
    for lw in r.w.layers:
        tensors += [lw.qkv, lw.o, lw.gate_up, lw.down, lw.ln_in, lw.ln_post]
    assert {t.device for t in tensors} == {want[0]}
    # the model's own modules are views of the runner's fused weights: one copy of each matrix
    def storage(t: torch.Tensor) -> int:
        return t.untyped_storage().data_ptr()

    assert storage(model.model.layers[0].self_attn.k_proj.weight) == storage(r.w.layers[0].qkv)
    # tied embeddings share the lm_head's storage
    assert storage(model.model.embed_tokens.weight) == storage(r.w.head)
    ids = loaded.tokenizer.encode("Hello world")
    logits = r.prefill(0, ids)
    assert logits.device == want[0] and logits.shape == (model.config.vocab_size,)
    with torch.inference_mode():
        ref = model(torch.tensor([ids])).logits[0, -1].float()
    tol = 1e-4 if dtype == "float32" else 0.1
    torch.testing.assert_close(logits, ref, atol=tol, rtol=tol)


def test_static_step_equals_decode_and_padding_touches_no_slot(tiny_loaded):
    """The step CUDA graphs capture (bucket padding, whole-capacity attention under a position
    mask, padding rows writing to the scratch slot), run eagerly on CPU, against ``decode``."""
    from backends.engine.cudagraph import GraphedDecode

    model, tok = tiny_loaded.model, tiny_loaded.tokenizer
    eager = Runner(model, slots=4, max_len=64, kv_dtype=torch.float32)
    static = Runner(model, slots=4, max_len=64, kv_dtype=torch.float32)
    graphed = GraphedDecode(static, capture=False)
    prompts = [tok.encode("Hello world"), tok.encode("The rain in Spain"), tok.encode("red")]
    for r in (eager, static):
        r.prefill_many(0, prompts)
        r.prefill(3, tok.encode("def add(a, b):"))  # a free slot holding a cached prompt
    held = static.cache.kv[:, :, 3].clone()
    toks = [5, 9, 11]
    for _ in range(4):
        assert graphed.bucket(len(toks)) == 4  # padded by one row
        want, got = eager.decode(toks), graphed.decode(toks)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        toks = want.argmax(dim=1).tolist()
    assert torch.equal(static.cache.kv[:, :, 3], held)
    assert static.cache.tokens == eager.cache.tokens
