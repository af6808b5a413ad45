"""The response cache's cost: the gateway's CPU per request for a hit, a miss (kept) and the
same request with the cache off (today's request), through the fast mock of ``../shared/bench``.

    .venv/bin/python bench/cache.py [--requests 2000] [--rounds 3] [--store redis|memory] [--against REV]

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
from overhead import KEY, MOCK, ROOT, Procs, cpu_seconds, free_port, pinned, wait_http, worktree


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
    ap.add_argument("--against", metavar="REV", help="also measure the code of git revision REV, alternately")
    args = ap.parse_args()
    if args.against:
        with worktree(args.against) as old:
            return run(args, {args.against: old, "new": ROOT})
    return run(args, {"new": ROOT})


def run(args: argparse.Namespace, trees: dict[str, Path]) -> int:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    py = sys.executable
    procs = Procs()
    try:
        up = free_port()
        procs.start(pinned("0", [py, str(MOCK), "--port", str(up)]))
        rport = free_port()
        if args.store == "redis":
            procs.start(pinned("0", ["redis-server", "--port", str(rport), "--save", "",
                                     "--appendonly", "no"]))
            time.sleep(0.3)
        gws = {}
        for db, (name, tree) in enumerate(trees.items()):
            store = f"redis://127.0.0.1:{rport}/{db}" if args.store == "redis" else "memory://"
            cfg = Path(tempfile.mkdtemp()) / "cache.yaml"
            cfg.write_text(config_yaml(up, store))
            port = free_port()
            serve = [py, "-m", "switchyard", "serve", "--config", str(cfg), "--port", str(port)]
            gws[name] = (port, procs.start(pinned("1", serve), cwd=tree))
        wait_http(up, "/health")
        for port, _ in gws.values():
            wait_http(port, "/health")
        n = args.requests

        def chat(model: str, text: str) -> dict:
            return {"model": model, "temperature": 0, "max_tokens": 16,
                    "messages": [{"role": "user", "content": text}]}

        same = chat("mock/on", "the same question")
        for port, gw in gws.values():  # warm-up
            measure(f"http://127.0.0.1:{port}/v1/chat/completions",
                    [chat("mock/off", "warm")] * 200 + [same] * 200, gw.pid, args.concurrency)
        runs: dict[tuple[str, str], list[float]] = {(t, k): [] for t in gws for k in ("off", "miss", "hit")}
        seen: dict[tuple[str, str], dict[str, int]] = {k: {} for k in runs}
        errors = 0
        for r in range(args.rounds):
            for name in (list(gws) if r % 2 == 0 else list(gws)[::-1]):
                port, gw = gws[name]
                tag = uuid.uuid4().hex[:8]
                kinds = {"off": [chat("mock/off", f"q {tag} {i}") for i in range(n)],
                         "miss": [chat("mock/on", f"q {tag} {i}") for i in range(n)],
                         "hit": [same] * n}
                for kind, bodies in kinds.items():
                    cpu, got, err = measure(f"http://127.0.0.1:{port}/v1/chat/completions", bodies, gw.pid,
                                            args.concurrency)
                    runs[(name, kind)].append(cpu)
                    errors += err
                    for k, v in got.items():
                        seen[(name, kind)][k] = seen[(name, kind)].get(k, 0) + v
        med = {k: statistics.median(v) for k, v in runs.items()}
        print(f"gateway CPU per whole chat request (us), {args.rounds} interleaved rounds of {n}, "
              f"c={args.concurrency}, store {args.store}, {os.cpu_count()} cores shared")
        today = med[(next(iter(gws)), "off")]  # REV's request with the cache off, when given
        for (name, kind), v in runs.items():
            each = ", ".join(f"{x:.0f}" for x in v)
            print(f"  {name:<8} {kind:<5}{med[(name, kind)]:>8.0f} us  {med[(name, kind)] / today:.3f}x   "
                  f"runs {each}   headers {seen[(name, kind)]}")
        m, hit = med[("new", "miss")], med[("new", "hit")]
        print(f"  new: miss/off {m / med[('new', 'off')]:.3f}x   miss/today's request {m / today:.3f}x   "
              f"hit/miss {hit / m:.3f}x   hit {hit / 1000:.3f} ms   errors {errors}")
        return 1 if errors else 0
    finally:
        procs.stop()


if __name__ == "__main__":
    raise SystemExit(main())
