"""The engine's per-row host work in a decode step, at a large batch, against the two-decode
detokenizer in the same process.

    .venv/bin/python bench/engine_host.py [--rows 256] [--steps 50]

After the forward, every row of a step costs Python in the engine process: the sampled token is
detokenized, scanned for stop sequences and, for a stream, emitted as a chunk; the step's chunks
are pickled into one frame for the gateway. On a GPU a captured decode step of SmolLM2 at 256 rows
took ~4 ms (issue 12's probe), so this work bounds a large batch there. It is timed here on the
default model's tokenizer with ``--rows`` streaming greedy rows (half of them with two stop
sequences), the forward and the argmax left out: first with the engine's detokenizer, then with
``PrefixDetokenizer`` (two ``decode`` calls a token) swapped in for every row. Then one admission's
search for the longest cached prefix over as many slots, against comparing token by token.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()

    import torch

    from switchyard.core.canonical import CanonicalRequest
    from switchyard.core.deployments import EngineConfig
    from switchyard.engine.loader import load
    from switchyard.engine.scheduler import Engine
    from switchyard.engine.stops import PrefixDetokenizer

    loaded = load(EngineConfig(dtype="float32", threads=2))
    out: list[tuple] = []
    eng = Engine(loaded.model, loaded.tokenizer, out.append, max_batch=args.rows)
    for i in range(args.rows):
        eng.submit(i, CanonicalRequest(kind="completion", dialect="openai", model="local/smollm2",
                                       prompt=[f"Story {i}: once upon a time"], max_tokens=4000,
                                       temperature=0.0, ignore_eos=True, stream=True,
                                       stop=["\n\nUser:", "###"] if i % 2 else None))
    while eng.waiting:
        eng.step()
    if len(eng.active) < args.rows:
        sys.exit(f"only {len(eng.active)} rows started: {out[-1]}")
    rows = list(eng.active)
    out.clear()
    # Tokens a real step would sample: a text the tokenizer cuts into words, spaces and bytes
    # (without the stops' characters: every row decodes every step).
    text = Path(__file__).read_text().replace("#", "") * 4
    stream = loaded.tokenizer.encode(text)[: args.steps * 4 + 8]

    def timed(label: str) -> float:
        advance = pickling = 0.0
        for step in range(args.steps):
            tokens = [stream[(step + r) % len(stream)] for r in range(len(rows))]
            t0 = time.perf_counter()
            for s, tok in zip(rows, tokens, strict=True):
                eng._advance(s, tok, None)
            t1 = time.perf_counter()
            pickle.dumps(("batch", out), protocol=pickle.HIGHEST_PROTOCOL)
            t2 = time.perf_counter()
            advance, pickling = advance + t1 - t0, pickling + t2 - t1
            out.clear()
        per = 1e6 / (args.steps * len(rows))
        print(f"{label:<34} advance {advance * per:6.2f} us/row   frame {pickling * per:5.2f} us/row   "
              f"step at {len(rows)} rows {(advance + pickling) * 1e3 / args.steps:6.2f} ms")
        return advance + pickling

    with torch.inference_mode():
        kind = type(rows[0].detok).__name__
        fast = timed(f"engine ({kind})")
        for s in rows:
            s.detok = PrefixDetokenizer(loaded.tokenizer, s.prompt.ids)
        slow = timed("baseline (PrefixDetokenizer)")
    assert not any(s.finish for s in rows)
    print(f"host work per step: {slow / fast:.2f}x faster than the baseline")
    admission(loaded.tokenizer, args.rows)


def admission(tokenizer: Any, slots: int) -> None:
    """Finding the longest cached prefix for an admitted chat prompt, every slot holding a chat
    that shares its ~300-token system prompt, against comparing token by token."""
    import torch

    from switchyard.engine.kvcache import KVCache

    system = tokenizer.encode(Path(__file__).read_text()[:1200])
    cache = KVCache(layers=1, slots=slots, kv_heads=1, head_dim=8, max_len=8, dtype=torch.float32)
    cache.tokens = [system + tokenizer.encode(f"User {s}: tell me a story.") for s in range(slots)]
    prompt = system + tokenizer.encode("User x: tell me a story.")

    def baseline() -> tuple[int | None, int]:  # the search as it was: every slot, token by token
        best, best_n = None, 0
        for s, held in enumerate(cache.tokens):
            n, i = min(len(held), len(prompt)), 0
            while i < n and held[i] == prompt[i]:
                i += 1
            if i > best_n:
                best, best_n = s, i
        return best, best_n

    assert cache.best_prefix(prompt, list(range(slots))) == baseline()
    ours = min(timeit.repeat(lambda: cache.best_prefix(prompt, list(range(slots))), number=20, repeat=5)) / 20
    base = min(timeit.repeat(baseline, number=20, repeat=5)) / 20
    print(f"longest cached prefix, {slots} slots sharing {len(system)} tokens: {ours * 1e3:.3f} ms "
          f"(token by token {base * 1e3:.2f} ms, {base / ours:.0f}x)")


if __name__ == "__main__":
    main()
