"""The built-in embedder through the gateway against sentence-transformers itself, in the same run.

    .venv/bin/python bench/embeddings.py [--threads 1] [--rounds 15] [--callers 32]

Baseline: ``SentenceTransformer.encode`` of 32 one-sentence inputs as one batch, in this process.
Gateway: the same 32 sentences as 32 concurrent ``POST /v1/embeddings`` requests (one sentence
each) through ``switchyard serve`` (memory store, metrics and access log on as configured by
default), whose embedder process batches what queues up. Both get ``--threads`` torch threads.
Rounds alternate between the two so drift hits both; the medians and their ratio are printed
(throughput in sentences per second). Loopback only; bounded by ``--rounds``.

The client is wrk-like, as the gateway's throughput is what is measured: ``--callers`` keep-alive
HTTP/1.1 connections opened before the first round, each writing its prepared request bytes and
reading the answer by its Content-Length (~0.06 ms of CPU a request, on uvloop). An httpx client
took ~3.7 ms a request on the same two cores as the gateway and the embedder, and measured itself
(0.60x with it). The first warm-up round's vectors are checked against sentence-transformers'.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

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


class Conn:
    """One keep-alive HTTP/1.1 connection that writes prepared request bytes and reads the answer
    by its Content-Length: a wrk-like client, so that the client's own CPU (httpx spent ~3.7 ms a
    request here, on the cores the gateway and the embedder use) is not what the bench measures."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def post(self, request: bytes) -> bytes:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = head[9:12]
        length = None
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        if length is None:
            raise RuntimeError(f"no Content-Length in the answer: {head!r}")
        body = await self.reader.readexactly(length)
        if status != b"200":
            raise RuntimeError(f"HTTP {status.decode()}: {body[:300]!r}")
        return body

    def close(self) -> None:
        self.writer.close()


def request_bytes(port: int, text: str) -> bytes:
    body = json.dumps({"model": "local/minilm", "input": text}).encode()
    return (f"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


async def gateway_round(conns: list[Conn], requests: list[bytes]) -> tuple[float, list[bytes]]:
    t0 = time.perf_counter()
    bodies = await asyncio.gather(*(c.post(r) for c, r in zip(conns, requests, strict=True)))
    return len(requests) / (time.perf_counter() - t0), bodies


def st_round(model: object, texts: list[str]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    vecs = model.encode(texts, batch_size=len(texts), convert_to_numpy=True)  # type: ignore[attr-defined]
    return len(texts) / (time.perf_counter() - t0), vecs


def check(bodies: list[bytes], reference: Any) -> None:
    """The gateway's vectors are sentence-transformers' (a bench of wrong answers measures nothing)."""
    got = [json.loads(b)["data"][0]["embedding"] for b in bodies]
    worst = max(abs(x - float(y)) for g, ref in zip(got, reference, strict=True)
                for x, y in zip(g, ref, strict=True))
    if worst > 1e-4:
        raise SystemExit(f"the gateway's vectors differ from sentence-transformers' by {worst:.2e}")


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
        conns = [await Conn.open(port) for _ in range(args.callers)]
        for r in range(-2, args.rounds):  # two warm-up rounds each, not counted
            texts = SENTENCES[(r % 8) * args.callers:][:args.callers]
            a, bodies = await gateway_round(conns, [request_bytes(port, t) for t in texts])
            b, vecs = st_round(model, texts)
            if r == -2:
                check(bodies, vecs)
            if r >= 0:
                gw.append(a)
                st.append(b)
        for c in conns:
            c.close()
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
    uvloop.run(main())  # the gateway's own loop: the client takes less of the shared cores
