"""The time to first token a streamed answer's guard adds, and its CPU per chunk.

    .venv/bin/python bench/guards_ttfb.py [--n 40] [--gap-ms 20]

One gateway in this process in front of the fake upstream (``tests/fakes/upstream.py``), which
streams a 40-word answer one word a chunk, ``--gap-ms`` apart. Two models, the same upstream: one
without guardrails, one with every built-in detector redacting the answer. Interleaved, ``--n``
streams each; the figure is the median time from sending the request to the first answer text the
caller reads (an OpenAI chat stream's first non-empty delta). A word the guard holds (it may be an
email address's start) waits for the next chunk: the added time is about one chunk gap. Then
``Holder.feed`` alone: CPU per chunk with every detector on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from switchyard.core.config import parse_config
from switchyard.core.guardrails import BUILT_IN_DETECTORS
from switchyard.guards.detectors import BUILT_IN
from switchyard.guards.scan import Holder
from tests.fakes.upstream import Behaviour, FakeUpstream
from tests.gateway.conftest import KEY, MASTER, serve

WORDS = [f"word{i}" for i in range(40)]


async def first_text(gw, model: str) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "go"}]}
    async with gw.stream("POST", "/v1/chat/completions", json=body) as r:
        got = None
        async for line in r.aiter_lines():
            if got is None and line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                if delta.get("content"):
                    got = time.perf_counter() - t0
    assert got is not None
    return got


async def main(n: int, gap: float) -> None:
    async with FakeUpstream(default=Behaviour(pieces=[w if i == 0 else " " + w for i, w in enumerate(WORDS)],
                                              chunk_delay=gap)) as up:
        dep = [{"name": "d", "dialect": "openai", "base_url": up.url}]
        config = parse_config({
            "logging": {"access": False}, "master_key": MASTER, "metrics": {"enabled": False},
            "models": [{"name": "vendor/off", "deployments": dep},
                       {"name": "vendor/on", "deployments": dep, "guardrails": [
                           {"detectors": list(BUILT_IN_DETECTORS), "direction": "response"}]}],
            "teams": [{"name": "t"}], "keys": [{"id": "k", "team": "t", "key": KEY}]})
        async with serve(config) as gw:
            for model in ("vendor/off", "vendor/on"):  # warm both
                await first_text(gw, model)
            off, on = [], []
            for _ in range(n):
                off.append(await first_text(gw, "vendor/off"))
                on.append(await first_text(gw, "vendor/on"))
    mo, mn = statistics.median(off) * 1000, statistics.median(on) * 1000
    print(f"first answer text, median of {n} (chunk gap {gap * 1000:.0f} ms): guards off {mo:.1f} ms, "
          f"redaction on {mn:.1f} ms, added {mn - mo:+.1f} ms")
    h = Holder([(d, d.name) for d in BUILT_IN.values()], lambda hit, m: "[X]")
    chunks = [" " + w for w in WORDS] * 50
    t0 = time.process_time()
    for c in chunks:
        h.feed(c)
    per = (time.process_time() - t0) / len(chunks) * 1e6
    print(f"Holder.feed with all {len(BUILT_IN)} detectors: {per:.1f} us CPU per chunk")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--gap-ms", type=float, default=20)
    a = ap.parse_args()
    asyncio.run(main(a.n, a.gap_ms / 1000))
