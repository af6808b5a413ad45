"""engine.device / engine.dtype plumbing, checked with the CPU device (the suite runs without a
GPU): config validation, resolution, and every tensor of the model and the runner on the model's
device, with no second copy of any matrix."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch

from switchyard.core.deployments import EngineConfig
from switchyard.engine.loader import cpu_has_bf16, load, resolve_device, resolve_dtype
from switchyard.engine.runner import Runner


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
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    loaded = load(EngineConfig(path=str(tiny_dir), device="cpu", dtype=dtype, threads=1))
    w = loaded.model.weights
    want = (torch.device("cpu"), getattr(torch, dtype))
    weights = [w.embed, w.head, w.norm]
    for lw in w.layers:
        weights += [lw.qkv, lw.o, lw.gate_up, lw.down, lw.ln_in, lw.ln_post]
    assert {(t.device, t.dtype) for t in weights} == {want}
    r = Runner(loaded.model, slots=2, max_len=64, kv_dtype=want[1])
    assert {t.device for t in [r.cache.kv, *r._rope]} == {want[0]}

    # one copy of each matrix: the distinct storages hold exactly the file's numbers (a matrix
    # packed for oneDNN is an opaque tensor of its own: its numbers count)
    def storage(t: torch.Tensor) -> int:
        return id(t) if t.layout == torch._mkldnn else t.untyped_storage().data_ptr()

    def nbytes(t: torch.Tensor) -> int:
        return t.numel() * t.element_size() if t.layout == torch._mkldnn else t.untyped_storage().nbytes()

    held = {storage(t): nbytes(t) for t in weights}
    with safe_open(str(tiny_dir / "model.safetensors"), framework="pt") as f:
        numbers = sum(math.prod(f.get_slice(n).get_shape()) for n in f.keys())  # noqa: SIM118
    assert sum(held.values()) == numbers * want[1].itemsize
    assert storage(w.embed) == storage(w.head)  # tied embeddings share the lm_head's storage
    ids = loaded.tokenizer.encode("Hello world")
    logits = r.prefill(0, ids)
    assert logits.device == want[0] and logits.shape == (loaded.model.spec.vocab_size,)
    hf = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=want[1]).eval()
    with torch.inference_mode():
        ref = hf(torch.tensor([ids])).logits[0, -1].float()
    tol = 1e-4 if dtype == "float32" else 0.1
    torch.testing.assert_close(logits, ref, atol=tol, rtol=tol)


def test_static_step_equals_decode_and_padding_touches_no_slot(tiny_loaded):
    """The step CUDA graphs capture (bucket padding, whole-capacity attention under a position
    mask, padding rows writing to the scratch slot), run eagerly on CPU, against ``decode``."""
    from switchyard.engine.cudagraph import GraphedDecode

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


def test_engine_replaying_decode_steps_gives_the_same_output(tiny_loaded):
    """The engine as it runs on CUDA (decode steps replayed from the static step, beside
    admissions and a long prompt's chunks in the same step), run eagerly on CPU: the same tokens
    as the plain engine, and no decode rows built for the forward."""
    from switchyard.engine.cudagraph import GraphedDecode
    from switchyard.engine.runner import Replay
    from switchyard.engine.scheduler import Engine
    from tests.engine.conftest import Collector, completion, results, submit, text_of

    def greedy(prompt: str, n: int):
        return completion(prompt, temperature=0, max_tokens=n, ignore_eos=True)

    def run(graphed: bool) -> tuple[list[str], int]:
        col = Collector()
        eng = Engine(tiny_loaded.model, tiny_loaded.tokenizer, col, max_batch=6, prefill_chunk=8)
        eng.collector = col
        replays = 0
        if graphed:
            eng.runner.graphs = GraphedDecode(eng.runner, capture=False)
            plan = eng.runner.plan_decode

            def counted(tokens: list[int]):
                nonlocal replays
                groups = plan(tokens)
                assert [type(g) for g in groups] == [Replay]
                replays += 1
                return groups

            eng.runner.plan_decode = counted
        rids = [submit(eng, greedy(p, 24)) for p in ("Hello world", "red green")]
        eng.step()
        late = [submit(eng, greedy("The rain in Spain stays mainly in the plain. " * 3, 10)),
                submit(eng, greedy("def add(a, b):", 12))]
        while eng.busy:
            eng.step()
        return [text_of(results(eng, r)) for r in rids + late], replays

    plain, _ = run(graphed=False)
    replayed, replays = run(graphed=True)
    assert replayed == plain
    assert replays > 20 and all(plain)


def test_layout_per_device_and_dtype_and_packed_products_exact():
    from switchyard.engine.weights import NATURAL, ONEDNN, PACKED, layout_for

    cpu = torch.device("cpu")
    onednn = torch.backends.mkldnn.is_available()
    bf16 = onednn and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert layout_for(cpu, torch.float32) == ((PACKED, ONEDNN) if onednn else (NATURAL, NATURAL))
    assert layout_for(cpu, torch.bfloat16) == ((PACKED, NATURAL) if bf16 else (NATURAL, NATURAL))
    assert layout_for(torch.device("cuda"), torch.bfloat16) == (NATURAL, NATURAL)
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(96, 64, generator=gen)
    for shape in [(1, 64), (5, 64), (3, 7, 64)]:  # decode rows, prefill [n, t, hidden]
        x = torch.randn(*shape, generator=gen)
        want = torch.nn.functional.linear(x, w)
        for layout in (PACKED, ONEDNN):  # float32: the same numbers to rounding
            torch.testing.assert_close(layout.mm(x, layout.store(w)), want, atol=1e-5, rtol=1e-5)
        if bf16:  # bfloat16: packing changes nothing, bit for bit
            xb, wb = x.bfloat16(), w.bfloat16()
            assert torch.equal(PACKED.mm(xb, PACKED.store(wb)), torch.nn.functional.linear(xb, wb))
