"""The built-in embedder through the gateway against sentence-transformers itself, in the same run.

    .venv/bin/python bench/embeddings.py [--threads 1] [--rounds 15] [--callers 32]

Baseline: ``SentenceTransformer.encode`` of 32 one-sentence inputs as one batch, in this process.
Gateway: the same 32 sentences as 32 concurrent ``POST /v1/embeddings`` requests (one sentence
each) through ``switchyard serve`` (memory store, metrics and access log on as configured by
default), whose embedder process batches what queues up. Both get ``--threads`` torch threads.
Rounds alternate between the two so drift hits both; the medians and their ratio are printed
(throughput in sentences per second). Loopback only; bounded by ``--rounds``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.overhead import free_port, wait_http  # noqa: E402

KEY = "sk-bench"
SENTENCES = [f"Request {i} asks the gateway to embed one short sentence about topic {i % 7}."
             for i in range(256)]

CONFIG = """
server: {{host: 127.0.0.1, port: {port}}}
store: {{url: "memory://"}}
logging: {{level: warning, access: true}}
models:
  - name: local/minilm
    deployments:
      - name: embedder
        backend: embedder
        engine: {{threads: {threads}, max_batch: 64}}
teams: [{{name: bench}}]
keys: [{{id: bench, team: bench, key: {key}}}]
"""


def start_gateway(threads: int, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    cfg = Path(tempfile.mkdtemp(prefix="sy-bench-")) / "config.yaml"
    cfg.write_text(CONFIG.format(port=port, threads=threads, key=KEY))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.Popen([sys.executable, "-m", "switchyard.http.cli", "serve", "--config", str(cfg)],
                            env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    wait_http(port, "/ready", timeout=180)
    return proc, port


async def gateway_round(client: httpx.AsyncClient, texts: list[str]) -> float:
    async def one(t: str) -> None:
        r = await client.post("/v1/embeddings", json={"model": "local/minilm", "input": t})
        r.raise_for_status()

    t0 = time.perf_counter()
    await asyncio.gather(*(one(t) for t in texts))
    return len(texts) / (time.perf_counter() - t0)


def st_round(model: object, texts: list[str]) -> float:
    t0 = time.perf_counter()
    model.encode(texts, batch_size=len(texts), convert_to_numpy=True)  # type: ignore[attr-defined]
    return len(texts) / (time.perf_counter() - t0)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--callers", type=int, default=32)
    args = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    from switchyard.engine.embedder import default_model_path

    torch.set_num_threads(args.threads)
    model = SentenceTransformer(str(default_model_path()), device="cpu")
    log = Path(tempfile.mkdtemp(prefix="sy-bench-")) / "gateway.log"  # its stderr, for a post-mortem
    proc, port = start_gateway(args.threads, log)
    gw, st = [], []
    try:
        limits = httpx.Limits(max_connections=args.callers, max_keepalive_connections=args.callers)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=60,
                                     headers={"authorization": f"Bearer {KEY}"}) as client:
            for r in range(-2, args.rounds):  # two warm-up rounds each, not counted
                texts = SENTENCES[(r % 8) * args.callers:][:args.callers]
                a = await gateway_round(client, texts)
                b = st_round(model, texts)
                if r >= 0:
                    gw.append(a)
                    st.append(b)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    g, s = statistics.median(gw), statistics.median(st)
    print(f"{args.callers} one-sentence inputs, {args.threads} torch thread(s), {args.rounds} rounds, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"  sentence-transformers, one batch:      {s:8.1f} sentences/s")
    print(f"  gateway, {args.callers} concurrent requests:   {g:8.1f} sentences/s")
    print(f"  ratio gateway / sentence-transformers: {g / s:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
