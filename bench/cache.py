"""The response cache's cost: the gateway's CPU per request for a hit, a miss (kept) and the
same request with the cache off (today's request), through the fast mock of ``../shared/bench``.

    .venv/bin/python bench/cache.py [--duration 4] [--rounds 6] [--store redis|memory] [--against REV]

One gateway per tree (its own process, pinned to core 1; the mock, redis-server and the load on
core 0) with two models on one mock: ``off`` (no cache rule), ``on`` (an exact rule). Load is wrk
(C, one thread, ``--connections`` keep-alive connections, 64 by default as in
``bench/overhead.py``) posting whole chat requests (temperature 0, 16 tokens): to ``off`` with a
fresh prompt each; to ``on`` with a fresh prompt each (every one a miss, then kept); to ``on``
repeating one prompt (hits). The figure is the gateway process's user + system CPU over the run
divided by the requests answered (a cost that other load on a shared machine inflates less than
latency), medians over rounds. Within a round each kind runs on every tree back to back (the
trees' order alternating by round), so what a ratio compares was measured seconds apart; with
``--against`` the miss's ratio to REV's request is also given round by round, with a 90% bootstrap
interval (``overhead.paired``). The store is a redis-server of its own on a free port (default) or
memory://.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import KEY, MOCK, ROOT, Procs, free_port, paired, pinned, run_wrk, wait_http, worktree


def config_yaml(upstream: int, store: str, cache: bool = True) -> str:
    """``cache``: False for a tree older than the cache (its config has no such rule): its ``on``
    model is then ``off`` under another name, and its only figure is today's request."""
    rule = ", cache: {mode: exact, ttl: 600}" if cache else ""
    dep = f"[{{name: d0, backend: upstream, dialect: openai, base_url: 'http://127.0.0.1:{upstream}/v1'}}]"
    return f"""
store: {{url: '{store}'}}
metrics: {{enabled: true}}
logging: {{access: true}}
models:
  - {{name: mock/off, deployments: {dep}, price: {{prompt_per_1m: 1, completion_per_1m: 2}}}}
  - {{name: mock/on, deployments: {dep}, price: {{prompt_per_1m: 1, completion_per_1m: 2}}{rule}}}
teams: [{{name: bench}}]
keys: [{{id: bench, team: bench, key: {KEY}}}]
"""


# Each request a new prompt (a miss for ``on``) or, with BENCH_SAME set, always the same one.
LUA = """
local n, tag, same = 0, os.getenv("BENCH_TAG"), os.getenv("BENCH_SAME") ~= ""
local model = os.getenv("BENCH_MODEL")
local headers = {["Content-Type"] = "application/json",
                 ["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY")}
request = function()
  n = n + 1
  local q = same and "the same question" or ("q " .. tag .. " " .. n)
  return wrk.format("POST", nil, headers, '{"model": "' .. model .. '", "temperature": 0, "max_tokens": 16, '
    .. '"messages": [{"role": "user", "content": "' .. q .. '"}]}')
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"err_connect":%d,"err_read":%d,'
    .. '"err_write":%d,"err_status":%d,"err_timeout":%d}\\n', summary.requests, summary.duration,
    e.connect, e.read, e.write, e.status, e.timeout))
end
"""


def measure(url: str, model: str, same: bool, pid: int, conns: int, duration: int,
            script: Path) -> tuple[float, int, float]:
    """(gateway CPU per request in us, errors, requests/s) for ``duration`` seconds of wrk."""
    env = {"BENCH_KEY": KEY, "BENCH_MODEL": model, "BENCH_SAME": "1" if same else "",
           "BENCH_TAG": uuid.uuid4().hex[:8]}
    r = run_wrk(script, url, conns, duration, env, pid)
    return r["cpu_us"], r["errors"], r["rps"]


def cache_header(port: int, model: str, same: bool) -> str:
    """The x-switchyard-cache header one more such request is answered with."""
    q = "the same question" if same else f"q {uuid.uuid4().hex}"
    body = json.dumps({"model": model, "temperature": 0, "max_tokens": 16,
                       "messages": [{"role": "user", "content": q}]}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  b"authorization: Bearer %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                  % (KEY.encode(), len(body), body))
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    m = re.search(rb"\r\nx-switchyard-cache: (\w+)", raw)
    return m.group(1).decode() if m else "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=4, help="seconds per kind per tree per round")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--store", choices=("redis", "memory"), default="redis")
    ap.add_argument("--against", metavar="REV", help="also measure the code of git revision REV, alternately")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("bench/cache.py needs wrk: apt-get install wrk")
    if args.against:
        with worktree(args.against) as old:
            return run(args, {args.against: old, "new": ROOT})
    return run(args, {"new": ROOT})


KINDS = {"off": ("mock/off", False), "miss": ("mock/on", False), "hit": ("mock/on", True)}
ANSWERED = {"off": "bypass", "miss": "stored", "hit": "hit"}  # x-switchyard-cache, with a cache


def run(args: argparse.Namespace, trees: dict[str, Path]) -> int:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    py = sys.executable
    procs = Procs()
    script = Path(tempfile.mkdtemp()) / "cache.lua"
    script.write_text(LUA)
    try:
        up = free_port()
        procs.start(pinned("0", [py, str(MOCK), "--port", str(up)]))
        rport = free_port()
        if args.store == "redis":
            procs.start(pinned("0", ["redis-server", "--port", str(rport), "--save", "",
                                     "--appendonly", "no"]))
            time.sleep(0.3)
        gws = {}
        cached = {name: (tree / "switchyard/policies/cache.py").exists() for name, tree in trees.items()}
        for db, (name, tree) in enumerate(trees.items()):
            store = f"redis://127.0.0.1:{rport}/{db}" if args.store == "redis" else "memory://"
            cfg = Path(tempfile.mkdtemp()) / "cache.yaml"
            cfg.write_text(config_yaml(up, store, cached[name]))
            port = free_port()
            serve = [py, "-m", "switchyard", "serve", "--config", str(cfg), "--port", str(port)]
            gws[name] = (port, procs.start(pinned("1", serve), cwd=tree))
        wait_http(up, "/health")
        for port, _ in gws.values():
            wait_http(port, "/health")
        url = {name: f"http://127.0.0.1:{port}/v1/chat/completions" for name, (port, _) in gws.items()}
        for name, (_, gw) in gws.items():  # warm-up
            for model, same in KINDS.values():
                measure(url[name], model, same, gw.pid, args.connections, 1, script)
        runs: dict[tuple[str, str], list[float]] = {(t, k): [] for t in gws for k in KINDS}
        rates: dict[tuple[str, str], list[float]] = {(t, k): [] for t in gws for k in KINDS}
        errors = 0
        for r in range(args.rounds):
            for kind, (model, same) in KINDS.items():
                for name in (list(gws) if r % 2 == 0 else list(gws)[::-1]):
                    cpu, err, rps = measure(url[name], model, same, gws[name][1].pid, args.connections,
                                            args.duration, script)
                    runs[(name, kind)].append(cpu)
                    rates[(name, kind)].append(rps)
                    errors += err
        said = {(name, kind): cache_header(gws[name][0], model, same)
                for name in gws for kind, (model, same) in KINDS.items()}
        errors += sum(cached[name] and said[(name, kind)] != ANSWERED[kind] for name, kind in said)
        med = {k: statistics.median(v) for k, v in runs.items()}
        print(f"gateway CPU per whole chat request (us), {args.rounds} rounds of {args.duration} s per kind "
              f"and tree, wrk c={args.connections}, store {args.store}, {os.cpu_count()} cores shared")
        # Today's request: REV's with the cache off. On a tree without the cache its ``miss`` runs
        # are that request too (a fresh prompt, no rule), measured back to back with this tree's
        # miss: they count in its median, and each round's pair gives a ratio that the VM's drift
        # between the kinds' slots does not move.
        rev = next(iter(gws))
        uncached = ("off", "miss") if rev != "new" and not cached[rev] else ("off",)
        today = statistics.median([x for k in uncached for x in runs[(rev, k)]])
        for (name, kind), v in runs.items():
            each = ", ".join(f"{x:.0f}" for x in v)
            rate = statistics.median(rates[(name, kind)])
            print(f"  {name:<8} {kind:<5}{med[(name, kind)]:>8.0f} us  {med[(name, kind)] / today:.3f}x   "
                  f"{rate:>7.0f}/s   runs {each}   answered {said[(name, kind)]}")
        m, hit = med[("new", "miss")], med[("new", "hit")]
        print(f"  today's request ({rev}'s {' and '.join(uncached)}): {today:.0f} us")
        print(f"  new: miss/off {m / med[('new', 'off')]:.3f}x   miss/today's request {m / today:.3f}x   "
              f"hit/miss {hit / m:.3f}x   hit {hit / 1000:.3f} ms   errors {errors}")
        if rev != "new":
            old = runs[(rev, uncached[-1])]
            print(f"  new miss / {rev}'s {uncached[-1]}, {paired(runs[('new', 'miss')], old)}")
        return 1 if errors else 0
    finally:
        procs.stop()


if __name__ == "__main__":
    raise SystemExit(main())
