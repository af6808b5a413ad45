"""The response cache's cost: the gateway's CPU per request for a hit, a miss (kept) and the
same request with the cache off (today's request), through the fast mock of ``../shared/bench``.

    .venv/bin/python bench/cache.py [--requests 2000] [--rounds 3] [--store redis|memory]

One gateway (its own process, pinned to core 1; the mock and this client on core 0) with two
models on one mock: ``off`` (no cache rule), ``on`` (an exact rule). Each round sends, at
concurrency 16 over keep-alive connections, N whole chat requests to ``off``; N to ``on`` with a
fresh prompt each (every one a miss, then kept); N to ``on`` repeating one prompt (hits). The
figure is the gateway process's user + system CPU over the batch divided by N (a cost that other
load on a shared machine inflates less than latency), medians over interleaved rounds. The store
is a redis-server of its own on a free port (default) or memory://.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import KEY, MOCK, ROOT, Procs, cpu_seconds, free_port, pinned, wait_http


def config_yaml(upstream: int, store: str) -> str:
    dep = f"[{{name: d0, backend: upstream, dialect: openai, base_url: 'http://127.0.0.1:{upstream}/v1'}}]"
    return f"""
store: {{url: '{store}'}}
metrics: {{enabled: true}}
logging: {{access: true}}
models:
  - {{name: mock/off, deployments: {dep}, price: {{prompt_per_1m: 1, completion_per_1m: 2}}}}
  - {{name: mock/on, deployments: {dep}, price: {{prompt_per_1m: 1, completion_per_1m: 2}},
     cache: {{mode: exact, ttl: 600}}}}
teams: [{{name: bench}}]
keys: [{{id: bench, team: bench, key: {KEY}}}]
"""


async def batch(url: str, bodies: list[dict], conc: int) -> tuple[int, dict[str, int]]:
    import aiohttp

    headers = {"authorization": f"Bearer {KEY}"}
    seen: dict[str, int] = {}
    errors = 0
    it = iter(bodies)

    async def worker(s: aiohttp.ClientSession) -> None:
        nonlocal errors
        for body in it:
            async with s.post(url, json=body, headers=headers) as r:
                await r.read()
                if r.status != 200:
                    errors += 1
                v = r.headers.get("x-switchyard-cache", "?")
                seen[v] = seen.get(v, 0) + 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc)) as s:
        await asyncio.gather(*(worker(s) for _ in range(conc)))
    return errors, seen


def measure(url: str, bodies: list[dict], pid: int, conc: int) -> tuple[float, dict[str, int], int]:
    c0 = cpu_seconds(pid)
    errors, seen = asyncio.run(batch(url, bodies, conc))
    return (cpu_seconds(pid) - c0) / len(bodies) * 1e6, seen, errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000, help="requests per kind per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--store", choices=("redis", "memory"), default="redis")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    py = sys.executable
    procs = Procs()
    try:
        up = free_port()
        procs.start(pinned("0", [py, str(MOCK), "--port", str(up)]))
        store = "memory://"
        if args.store == "redis":
            rport = free_port()
            procs.start(pinned("0", ["redis-server", "--port", str(rport), "--save", "",
                                     "--appendonly", "no"]))
            time.sleep(0.3)
            store = f"redis://127.0.0.1:{rport}/0"
        cfg = Path(tempfile.mkdtemp()) / "cache.yaml"
        cfg.write_text(config_yaml(up, store))
        port = free_port()
        serve = [py, "-m", "switchyard", "serve", "--config", str(cfg), "--port", str(port)]
        gw = procs.start(pinned("1", serve), cwd=ROOT)
        wait_http(up, "/health")
        wait_http(port, "/health")
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        n = args.requests

        def chat(model: str, text: str) -> dict:
            return {"model": model, "temperature": 0, "max_tokens": 16,
                    "messages": [{"role": "user", "content": text}]}

        same = chat("mock/on", "the same question")
        measure(url, [chat("mock/off", "warm")] * 200 + [same] * 200, gw.pid, args.concurrency)  # warm-up
        runs: dict[str, list[float]] = {"off": [], "miss": [], "hit": []}
        seen: dict[str, dict[str, int]] = {k: {} for k in runs}
        errors = 0
        for _ in range(args.rounds):
            tag = uuid.uuid4().hex[:8]
            kinds = {"off": [chat("mock/off", f"q {tag} {i}") for i in range(n)],
                     "miss": [chat("mock/on", f"q {tag} {i}") for i in range(n)],
                     "hit": [same] * n}
            for kind, bodies in kinds.items():
                cpu, got, err = measure(url, bodies, gw.pid, args.concurrency)
                runs[kind].append(cpu)
                errors += err
                for k, v in got.items():
                    seen[kind][k] = seen[kind].get(k, 0) + v
        med = {k: statistics.median(v) for k, v in runs.items()}
        print(f"gateway CPU per whole chat request (us), {args.rounds} interleaved rounds of {n}, "
              f"c={args.concurrency}, store {args.store}, {os.cpu_count()} cores shared")
        for k in runs:
            each = ", ".join(f"{x:.0f}" for x in runs[k])
            print(f"  {k:<5}{med[k]:>8.0f} us   runs {each}   headers {seen[k]}")
        print(f"  miss/off {med['miss'] / med['off']:.3f}x   hit/miss {med['hit'] / med['miss']:.3f}x   "
              f"hit {med['hit'] / 1000:.3f} ms   errors {errors}")
        return 1 if errors else 0
    finally:
        procs.stop()


if __name__ == "__main__":
    raise SystemExit(main())
