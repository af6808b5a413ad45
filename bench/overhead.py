"""The gateway's added latency and its throughput, beside calling the upstream directly.

    .venv/bin/python bench/overhead.py [--duration 8] [--deployments 1] [--quick] [--store redis] [--limits]
    .venv/bin/python bench/overhead.py --workers 2 [--duration 8]
    .venv/bin/python bench/overhead.py --providers [--duration 8] [--quick] [--against REV | --python PY]
    .venv/bin/python bench/overhead.py --against REV [--rounds 4] [--duration 4] [--store redis] [--limits]
    .venv/bin/python bench/overhead.py --python PY [--rounds 4] [--duration 4] [--store redis] [--limits]
        (the last three with [--fresh])

Pins the server under test (the gateway, or for the baseline a second mock) to core 1 and the
load generator plus the gateway's upstream mock to core 0, as ``../shared/bench`` does. Load is
wrk (C, one thread; ``apt-get install wrk``) for latency and throughput, and an asyncio client in
this process for a stream's time to first byte. Every figure is printed beside the direct one,
with the ratio or the difference. The gateway runs twice in the same run: as configured by
default (``/metrics`` counting and the access log on, written to a file) and with both off; their
ratio is what observability costs. ``--store redis`` gives the gateways a redis-server of their
own (core 0) instead of memory://, ``--limits`` gives the key four limits it never reaches (rpm,
tpm, tokens_per_day, max_concurrency): what admission and settlement cost. ``--workers N``
instead compares N worker processes with one
at c=64 (Redis store; every process shares both cores with the load and the mock).
``--against REV`` instead runs the code of git revision REV (a worktree of its own, removed
afterwards) and this tree side by side, same config, same store, alternately for ``--rounds``
rounds: server CPU per request (c=64) and per 20-chunk stream (c=32), and a stream's time to first
byte (c=1, the asyncio client; what a change that saves writes may cost), medians and new/old
ratios, and the round-by-round ratio with a 90% bootstrap interval (``paired``). With ``--fresh``
both gateways start anew each round: on a VM where one process of a tree can run a few per cent
slower than another of the same tree for its whole life, that luck then cancels across rounds. ``--python PY``
measures the same way this tree run by this venv's interpreter and by PY (another venv's
``bin/python`` with this project's dependencies): what the interpreter's build costs.
``--providers`` instead compares the gateway's CPU per streamed chat request for three models in
one gateway: the OpenAI pass-through, Anthropic (named SSE events) and Bedrock (SigV4 signing,
event-stream frames), each against ``bench/provider_mock.py`` streaming the same 20-token answer
in that provider's wire format, in interleaved rounds; a 4 KB Claude Code body to
``/v1/messages``, forwarded as it came on Anthropic's native lane and translated for the OpenAI
upstream; a whole Claude Code turn (87 KB: its system prompt, 12 tools) translated for an upstream
``gpt-5``, whose prompt tiktoken counts (``messages/agent``); plus SigV4 signing time; with
``--against REV`` the same on REV's code too, each case on both trees back to back (with
``--python PY``, this tree run by PY too). Loopback only; every run is bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The rig: ../shared/bench from the checkout (from a worktree under ../wt/, two levels up).
RIG = next((d for d in (ROOT.parent / "shared" / "bench", ROOT.parent.parent / "shared" / "bench")
            if d.exists()), ROOT.parent / "shared" / "bench")
MOCK = RIG / "mock_upstream.py"
PROVIDER_MOCK = Path(__file__).resolve().parent / "provider_mock.py"
WRK_LUA = RIG / "wrk_post.lua"
KEY = "sk-bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port: int, path: str = "/health", timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"nothing answered on port {port} within {timeout} s")


def pinned(cpu: str, cmd: list[str]) -> list[str]:
    return ["taskset", "-c", cpu, *cmd] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else cmd


class Procs:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, cmd: list[str], **kw: object) -> subprocess.Popen[bytes]:
        # Logs go to a file, as in production: a pipe nobody reads would stall a busy gateway.
        with tempfile.TemporaryFile() as log:  # the child keeps its own descriptor
            p = subprocess.Popen(cmd, stdout=log, stderr=log,  # type: ignore[call-overload]
                                 start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def stop(self, only: list[subprocess.Popen[bytes]] | None = None) -> None:
        """Stop ``only`` these (default: every one started)."""
        procs = self.procs if only is None else only
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        self.procs = [p for p in self.procs if p not in procs]


Gateways = dict[str, tuple[int, subprocess.Popen[bytes]]]  # by side: its port and process


def start_gateways(procs: Procs, sides: dict[str, tuple[Path, str, Path]],
                   warm: Callable[[int, subprocess.Popen[bytes]], object]) -> Gateways:
    """A gateway on core 1 per side (its tree, interpreter and config), each answering ``/health``
    and then warmed up by ``warm(port, process)``."""
    gws: Gateways = {}
    for name, (tree, py, cfg) in sides.items():
        port = free_port()
        gws[name] = (port, procs.start(pinned("1", [py, "-m", "switchyard", "serve", "--config", str(cfg),
                                                    "--port", str(port)]), cwd=tree))
    for port, gw in gws.values():
        wait_http(port, "/health")
        warm(port, gw)
    return gws


def family(pid: int) -> list[int]:
    """The process's children (a supervisor's workers)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process: a cost per request that other load cannot inflate."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrk(url: str, body: dict, conns: int, duration: int, key: str | None, pid: int | None = None) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:  # wrk reads it at start
        json.dump(body, f)
        f.flush()
        env = {"BENCH_BODY_FILE": f.name, "BENCH_KEY": key or ""}
        return run_wrk(WRK_LUA, url, conns, duration, env, pid)


def run_wrk(script: Path, url: str, conns: int, duration: int, env: dict[str, str],
            pid: int | None = None) -> dict:
    """wrk (core 0, one thread) with ``script``, which prints a ``WRKJSON`` line (requests,
    duration_us, err_* counts); adds requests/s, errors and the CPU per request of process ``pid``."""
    cpu0 = cpu_seconds(pid) if pid else 0.0
    out = subprocess.run(pinned("0", ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency",
                                      "-s", str(script), url]),
                         env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=duration + 30).stdout
    m = re.search(r"WRKJSON (\{.*\})", out)
    if not m:
        raise RuntimeError(f"wrk printed no summary:\n{out}")
    r = json.loads(m.group(1))
    r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
    r["errors"] = sum(v for k, v in r.items() if k.startswith("err_"))
    r["cpu_us"] = (cpu_seconds(pid) - cpu0) / max(r["requests"], 1) * 1e6 if pid else float("nan")
    return r


async def ttfb(url: str, body: dict, key: str | None, n: int) -> list[float]:
    """Time to the first body byte of a stream, one request at a time (ms)."""
    import aiohttp

    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    out = []
    async with aiohttp.ClientSession() as s:
        for i in range(n + 20):
            t0 = time.perf_counter()
            async with s.post(url, data=json.dumps(body), headers=headers) as r:
                await r.content.readany()
                first = time.perf_counter() - t0
                await r.read()
            if i >= 20:  # warm-up
                out.append(first * 1000)
    return out


# ``--limits``: the key's four limits, high enough never to refuse (what admission costs, not refusals).
LIMITS = "{rpm: 100000000, tpm: 1000000000, tokens_per_day: 100000000000, max_concurrency: 1000}"


def config_yaml(upstreams: list[int], observe: bool = True, store: str = "memory://",
                limits: bool = False) -> str:
    deps = "\n".join(f"      - {{name: d{i}, backend: upstream, dialect: openai, "
                     f"base_url: 'http://127.0.0.1:{p}/v1'}}" for i, p in enumerate(upstreams))
    return f"""
store: {{url: '{store}'}}
metrics: {{enabled: {str(observe).lower()}}}
logging: {{access: {str(observe).lower()}}}
models:
  - name: mock/gpt
    strategy: weighted
    deployments:
{deps}
teams: [{{name: bench}}]
keys: [{{id: bench, team: bench, key: {KEY}{", limits: " + LIMITS if limits else ""}}}]
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=8, help="seconds per wrk run")
    ap.add_argument("--deployments", type=int, default=1, help="deployments in the model group")
    ap.add_argument("--quick", action="store_true", help="2 s runs (a smoke check, not figures)")
    ap.add_argument("--workers", type=int, default=1, help="N > 1: compare N worker processes with 1")
    ap.add_argument("--providers", action="store_true",
                    help="gateway CPU per streamed request: anthropic and bedrock against openai")
    ap.add_argument("--store", choices=("memory", "redis"), default="memory",
                    help="the gateways' store: memory://, or a redis-server of their own")
    ap.add_argument("--limits", action="store_true",
                    help="the key has rpm, tpm, tokens_per_day and max_concurrency (never reached)")
    ap.add_argument("--against", metavar="REV", help="compare with the code of git revision REV, alternately")
    ap.add_argument("--rounds", type=int, default=4, help="--against, --python: rounds per side")
    ap.add_argument("--fresh", action="store_true",
                    help="--against, --python: start the gateways anew each round (a process's own "
                         "luck, its hash seed and where its memory lies, then cancels across rounds)")
    ap.add_argument("--python", metavar="PY",
                    help="compare this tree run by interpreter PY (another venv's bin/python, with this "
                         "project's dependencies) with this venv's, alternately")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("bench/overhead.py needs wrk: apt-get install wrk")
    if not MOCK.exists():
        sys.exit(f"bench/overhead.py needs the mock upstream at {MOCK}")
    dur = 2 if args.quick else args.duration
    if args.providers:
        return compare_providers(1 if args.quick else args.duration, args.quick, args.against,
                                 args.rounds if args.against or args.python else 3, args.python, args.fresh)
    if args.workers > 1:
        return compare_workers(args.workers, dur)
    if args.against:
        return compare_trees(args.against, dur, args.rounds, args.store, args.limits, args.fresh)
    if args.python:
        return compare_interpreters(args.python, dur, args.rounds, args.store, args.limits, args.fresh)
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})  # this process (the TTFB client) is load too: core 0
    py = sys.executable
    procs = Procs()
    try:
        ups = [free_port() for _ in range(args.deployments)]
        for p in ups:  # the gateway's upstream(s): core 0, beside the load generator
            procs.start(pinned("0", [py, str(MOCK), "--port", str(p)]))
        direct_port = free_port()  # the baseline server under test: a mock alone on core 1
        direct = procs.start(pinned("1", [py, str(MOCK), "--port", str(direct_port)]))
        store = "memory://"
        if args.store == "redis":  # beside the load, on core 0
            rport = free_port()
            redis = ["redis-server", "--port", str(rport), "--save", "", "--appendonly", "no"]
            procs.start(pinned("0", redis))
            store = f"redis://127.0.0.1:{rport}/0"
        gws = {}
        for name, observe in (("gateway", True), ("quiet", False)):
            cfg = Path(tempfile.mkdtemp()) / "bench.yaml"
            cfg.write_text(config_yaml(ups, observe, store, args.limits))
            port = free_port()
            gws[name] = (port, procs.start(pinned("1", [py, "-m", "switchyard", "serve", "--config", str(cfg),
                                                        "--port", str(port)]), cwd=ROOT))
        for p in (*ups, direct_port, *(port for port, _ in gws.values())):
            wait_http(p, "/health")
        time.sleep(0.5)
        gw_port, gw = gws["gateway"]
        idle_rss = rss_mib(gw.pid)

        comp = {"model": "mock/gpt", "prompt": "Say this is a test", "max_tokens": 16}
        stream = {"model": "mock/gpt", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20,
                  "stream": True, "stream_options": {"include_usage": True}}
        targets = {"direct": (f"http://127.0.0.1:{direct_port}/v1", None, direct.pid),
                   "gateway": (f"http://127.0.0.1:{gw_port}/v1", KEY, gw.pid),
                   "quiet": (f"http://127.0.0.1:{gws['quiet'][0]}/v1", KEY, gws["quiet"][1].pid)}
        res: dict[str, dict[str, float]] = {k: {} for k in targets}
        for name, (base, key, pid) in targets.items():
            # Warm-up at c=1: a burst first leaves the next seconds noisier on these VMs.
            wrk(base + "/completions", comp, 1, 1, key)
            r1 = wrk(base + "/completions", comp, 1, dur, key)
            r32 = wrk(base + "/completions", comp, 32, dur, key, pid)
            s32 = wrk(base + "/chat/completions", stream, 32, dur, key, pid)
            t = asyncio.run(ttfb(base + "/chat/completions", stream, key, 200 if not args.quick else 50))
            errors = r1["errors"] + r32["errors"] + s32["errors"]
            res[name] = {"p50": r1["lat_p50_us"] / 1000, "p99": r1["lat_p99_us"] / 1000,
                         "rps": r32["rps"], "streams": s32["rps"], "ttfb50": statistics.median(t),
                         "ttfb99": sorted(t)[int(len(t) * 0.99) - 1], "errors": errors,
                         "cpu_req": r32["cpu_us"], "cpu_stream": s32["cpu_us"]}
        peak_rss, quiet_rss = rss_mib(gw.pid), rss_mib(gws["quiet"][1].pid)
        # On vs off once more, interleaved: other load on a shared machine moves both alike.
        rounds: dict[str, list[dict]] = {"gateway": [], "quiet": []}
        for _ in range(3):
            for name in rounds:
                base, key, pid = targets[name]
                rounds[name].append(wrk(base + "/completions", comp, 32, max(dur // 2, 2), key, pid))
    finally:
        procs.stop()

    d, g = res["direct"], res["gateway"]
    print(f"\nSwitchyard overhead bench: {args.deployments} deployment(s) in the group, "
          f"{dur} s per run, gateway on core 1, load + upstream on core 0\n")
    print(f"{'figure':<44}{'direct':>10}{'gateway':>10}{'added / ratio':>16}")
    rows = [("p50 latency, non-streaming, c=1 (ms)", "p50", "diff"),
            ("p99 latency, non-streaming, c=1 (ms)", "p99", "diff"),
            ("stream time to first byte p50, c=1 (ms)", "ttfb50", "diff"),
            ("stream time to first byte p99, c=1 (ms)", "ttfb99", "diff"),
            ("requests/s, non-streaming, c=32", "rps", "ratio"),
            ("20-chunk streams/s, c=32", "streams", "ratio")]
    for label, k, how in rows:
        extra = f"+{g[k] - d[k]:.3f} ms" if how == "diff" else f"{g[k] / d[k]:.3f}x"
        print(f"{label:<44}{d[k]:>10.3f}{g[k]:>10.3f}{extra:>16}")
    for label, k in (("server CPU per request, c=32 (us)", "cpu_req"),
                     ("server CPU per 20-chunk stream, c=32 (us)", "cpu_stream")):
        print(f"{label:<44}{d[k]:>10.0f}{g[k]:>10.0f}{g[k] - d[k]:>+13.0f} us")
    print(f"{'errors (non-2xx, socket)':<44}{d['errors']:>10.0f}{g['errors']:>10.0f}")
    print(f"\ngateway RSS: idle {idle_rss:.1f} MiB, after load {peak_rss:.1f} MiB")
    litellm = {"rps": 85.0, "streams": 35.0}  # ../shared/bench/README.md reference run, this box
    print(f"vs LiteLLM Proxy's reference figures on this rig: {g['rps'] / litellm['rps']:.1f}x requests/s, "
          f"{g['streams'] / litellm['streams']:.1f}x streams/s")
    q = res["quiet"]
    print(f"gateway with observability off: RSS after load {quiet_rss:.1f} MiB")
    on_rps = statistics.median(r["rps"] for r in rounds["gateway"])
    off_rps = statistics.median(r["rps"] for r in rounds["quiet"])
    on_cpu = statistics.median(r["cpu_us"] for r in rounds["gateway"])
    off_cpu = statistics.median(r["cpu_us"] for r in rounds["quiet"])
    print("\nObservability (/metrics counting + access log) on, the default, vs both off, same run.")
    print(f"Interleaved, 3 rounds of {max(dur // 2, 2)} s at c=32, medians: requests/s on {on_rps:.0f}, "
          f"off {off_rps:.0f}, on/off {on_rps / off_rps:.3f}x; server CPU per request on {on_cpu:.0f} us, "
          f"off {off_cpu:.0f} us, off/on {off_cpu / on_cpu:.3f}x")
    print("The runs above, one each:")
    print(f"{'figure':<44}{'off':>10}{'on':>10}{'on / off':>16}")
    for label, k in (("requests/s, non-streaming, c=32", "rps"), ("20-chunk streams/s, c=32", "streams")):
        print(f"{label:<44}{q[k]:>10.0f}{g[k]:>10.0f}{g[k] / q[k]:>15.3f}x")
    for label, k in (("server CPU per request, c=32 (us)", "cpu_req"),
                     ("server CPU per 20-chunk stream, c=32 (us)", "cpu_stream")):
        print(f"{label:<44}{q[k]:>10.0f}{g[k]:>10.0f}{g[k] - q[k]:>+13.0f} us")
    print(f"{'p50 latency, non-streaming, c=1 (ms)':<44}{q['p50']:>10.3f}{g['p50']:>10.3f}"
          f"{g['p50'] - q['p50']:>+13.3f} ms")
    return 0


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """The code of git revision ``rev`` in a worktree of its own, removed afterwards (run with
    this venv: its dependencies must be this tree's)."""
    tree = Path(tempfile.mkdtemp()) / "old"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
                   check=True, capture_output=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                       capture_output=True)


def paired(new: list[float], old: list[float]) -> str:
    """The median of the round-by-round ratios new/old (each pair measured seconds apart, so the
    machine's drift between rounds cancels) and a 90% bootstrap interval for it: how far a noisy
    machine lets a run tell the two apart."""
    ratios = sorted(n / o for n, o in zip(new, old, strict=True))
    rng = random.Random(0)  # the same rounds give the same interval
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return (f"round by round {statistics.median(ratios):.3f}x (90% interval {meds[100]:.3f}-"
            f"{meds[1899]:.3f}x; from {ratios[0]:.3f}x to {ratios[-1]:.3f}x)")


def compare_trees(rev: str, dur: int, rounds: int, store_kind: str, limits: bool, fresh: bool = False) -> int:
    """This tree against revision ``rev``: two gateways on core 1 (one idle while the other is
    measured), same config and store (Redis: a database each), measured alternately."""
    with worktree(rev) as old_tree:
        res = _compare({"old": (old_tree, sys.executable), "new": (ROOT, sys.executable)}, dur, rounds,
                       store_kind, limits, fresh)
    report(f"{rev} (old) and this tree (new)", res, dur, rounds, store_kind, limits, fresh)
    return 0


def compare_interpreters(python: str, dur: int, rounds: int, store_kind: str, limits: bool,
                         fresh: bool = False) -> int:
    """This tree run by this venv's interpreter and by ``python``, as ``compare_trees`` runs two
    trees: what the interpreter's build (PGO, LTO, a shared libpython) costs the same code."""
    res = _compare({"old": (ROOT, sys.executable), "new": (ROOT, python)}, dur, rounds, store_kind, limits,
                   fresh)
    for name, py in (("old", sys.executable), ("new", python)):
        out = subprocess.run([py, "-c", "import sys, sysconfig; print(sys.version.split()[0], "
                              "sysconfig.get_config_var('CONFIG_ARGS'))"], capture_output=True, text=True)
        print(f"{name}: {py}: {out.stdout.strip()[:300]}")
    report("this tree run by this venv's Python (old) and by the one given (new)", res, dur, rounds,
           store_kind, limits, fresh)
    return 0


def report(what: str, res: dict[str, dict[str, list[float]]], dur: int, rounds: int, store_kind: str,
           limits: bool, fresh: bool = False) -> None:
    print(f"\nserver CPU and time to first byte, {what} alternately: {rounds} "
          f"rounds of {dur} s each, store {store_kind}{' with four limits on the key' if limits else ''}, "
          f"gateway on core 1{', both gateways started anew each round' if fresh else ''}")
    for k, label in (("req", "per request, c=64 (us)"), ("stream", "per 20-chunk stream, c=32 (us)"),
                     ("ttfb", "stream's first byte, c=1 (us)")):
        o, n = statistics.median(res["old"][k]), statistics.median(res["new"][k])
        runs = "  ".join(f"{name} " + " ".join(f"{x:.0f}" for x in res[name][k]) for name in ("old", "new"))
        print(f"  {label:<32} old {o:6.0f}  new {n:6.0f}  new/old {n / o:.3f}x, "
              f"{paired(res['new'][k], res['old'][k])}   runs: {runs}")


def _compare(sides: dict[str, tuple[Path, str]], dur: int, rounds: int, store_kind: str,
             limits: bool, fresh: bool = False) -> dict[str, dict[str, list[float]]]:
    """``sides``: "old" and "new", each a tree and the interpreter that runs it; ``fresh``: both
    gateways started anew each round."""
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    py = sys.executable
    procs = Procs()
    res: dict[str, dict[str, list[float]]] = {t: {k: [] for k in ("req", "stream", "ttfb")}
                                              for t in ("old", "new")}
    comp = {"model": "mock/gpt", "prompt": "Say this is a test", "max_tokens": 16}
    stream = {"model": "mock/gpt", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20,
              "stream": True, "stream_options": {"include_usage": True}}
    try:
        up = free_port()
        procs.start(pinned("0", [py, str(MOCK), "--port", str(up)]))
        rport = free_port()
        if store_kind == "redis":
            procs.start(pinned("0", ["redis-server", "--port", str(rport), "--save", "",
                                     "--appendonly", "no"]))
        wait_http(up, "/health")
        cfgs = {}  # written once: a fresh round starts its gateways on the same files
        for db, name in enumerate(sides):
            store = f"redis://127.0.0.1:{rport}/{db}" if store_kind == "redis" else "memory://"
            cfgs[name] = Path(tempfile.mkdtemp()) / "bench.yaml"
            cfgs[name].write_text(config_yaml([up], True, store, limits))

        def gateways() -> Gateways:
            return start_gateways(procs, {n: (tree, gw_py, cfgs[n]) for n, (tree, gw_py) in sides.items()},
                                  lambda port, gw: wrk(f"http://127.0.0.1:{port}/v1/completions", comp, 64,
                                                       1, KEY, gw.pid))

        gws = gateways()
        for r in range(rounds):
            if fresh and r:
                procs.stop([gw for _, gw in gws.values()])
                gws = gateways()
            for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
                port, gw = gws[name]
                base = f"http://127.0.0.1:{port}/v1"
                a = wrk(base + "/completions", comp, 64, dur, KEY, gw.pid)
                b = wrk(base + "/chat/completions", stream, 32, dur, KEY, gw.pid)
                if a["errors"] or b["errors"]:
                    raise RuntimeError(f"{name}: {a['errors'] + b['errors']} errors")
                res[name]["req"].append(a["cpu_us"])
                res[name]["stream"].append(b["cpu_us"])
                first = asyncio.run(ttfb(base + "/chat/completions", stream, KEY, 200))
                res[name]["ttfb"].append(statistics.median(first) * 1000)
    finally:
        procs.stop()
    return res


def compare_workers(n: int, dur: int) -> int:
    """Requests/s at c=64 with ``--workers n`` and with one worker, the same Redis store."""
    py = sys.executable
    procs = Procs()
    res: dict[int, dict] = {}
    try:
        up = free_port()
        procs.start([py, str(MOCK), "--port", str(up)])
        rport = free_port()
        procs.start(["redis-server", "--port", str(rport), "--save", "", "--appendonly", "no"])
        wait_http(up, "/health")
        time.sleep(0.5)
        cfg = Path(tempfile.mkdtemp()) / "bench.yaml"
        cfg.write_text(config_yaml([up], store=f"redis://127.0.0.1:{rport}/0"))
        comp = {"model": "mock/gpt", "prompt": "Say this is a test", "max_tokens": 16}
        for workers in (1, n, 1, n):  # interleaved: drift on a shared machine hits both alike
            port = free_port()
            gw = procs.start([py, "-m", "switchyard", "serve", "--config", str(cfg), "--port", str(port),
                              "--workers", str(workers)], cwd=ROOT)
            wait_http(port, "/health")
            time.sleep(1.0)
            base = f"http://127.0.0.1:{port}/v1/completions"
            wrk(base, comp, 8, 1, KEY)  # warm-up
            pids = [gw.pid, *family(gw.pid)]
            cpu0 = sum(cpu_seconds(p) for p in pids)
            r = wrk(base, comp, 64, dur, KEY)
            cpu = sum(cpu_seconds(p) for p in pids) - cpu0
            res.setdefault(workers, {"rps": [], "errors": 0, "cpu_us": []})
            res[workers]["rps"].append(r["rps"])
            res[workers]["errors"] += r["errors"]
            res[workers]["cpu_us"].append(cpu / max(r["requests"], 1) * 1e6)
            os.killpg(gw.pid, signal.SIGTERM)
            gw.wait(timeout=30)
    finally:
        procs.stop()
    one, many = statistics.median(res[1]["rps"]), statistics.median(res[n]["rps"])
    print(f"\nSwitchyard --workers {n} vs 1: non-streaming requests/s at c=64, {dur} s per run, "
          f"2 rounds interleaved, Redis store, {os.cpu_count()} cores shared by gateway, wrk and mock")
    print(f"  1 worker : {one:>8.0f} req/s  (runs: {', '.join(f'{x:.0f}' for x in res[1]['rps'])})")
    print(f"  {n} workers: {many:>8.0f} req/s  (runs: {', '.join(f'{x:.0f}' for x in res[n]['rps'])})")
    print(f"  ratio    : {many / one:.2f}x   errors: {res[1]['errors']} / {res[n]['errors']}")
    c1, cn = statistics.median(res[1]["cpu_us"]), statistics.median(res[n]["cpu_us"])
    print(f"  gateway CPU per request (all its processes): 1 worker {c1:.0f} us, {n} workers {cn:.0f} us: "
          f"with {n} free cores the ceiling would be {n * c1 / cn:.2f}x one worker's")
    return 0


BEDROCK_MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"


def providers_yaml(port: int) -> str:
    up = f"backend: upstream, base_url: 'http://127.0.0.1:{port}"
    return f"""
store: {{url: 'memory://'}}
models:
  - name: bench/openai
    deployments: [{{name: o, provider: openai, {up}/v1'}}]
  - name: bench/gpt-5
    deployments: [{{name: g, provider: openai, {up}/v1', model: gpt-5}}]
  - name: bench/anthropic
    deployments: [{{name: a, provider: anthropic, {up}', api_key: sk-ant-bench, model: claude-bench}}]
  - name: bench/bedrock
    deployments: [{{name: b, provider: bedrock, {up}', region: us-east-1, model: '{BEDROCK_MODEL}',
                   aws_access_key_id: AKIDBENCH, aws_secret_access_key: bench-secret}}]
teams: [{{name: bench}}]
keys: [{{id: bench, team: bench, key: {KEY}}}]
"""


def sign_us(n: int) -> float:
    """SigV4 over the Converse body this bench's request renders to, best of 5 rounds of n."""
    from switchyard.core.canonical import CanonicalRequest
    from switchyard.core.deployments import DeploymentConfig
    from switchyard.providers.aws.sigv4 import Credentials, SigV4
    from switchyard.providers.rows import wire_for

    dep = DeploymentConfig.model_validate({"name": "b", "provider": "bedrock", "region": "us-east-1",
                                           "aws_access_key_id": "AK", "aws_secret_access_key": "SK"})
    req = CanonicalRequest(kind="chat", model="bench/bedrock", dialect="openai", stream=True, max_tokens=20,
                           messages=[{"role": "user", "content": "hi"}])
    body = json.dumps(wire_for(dep).codec.render(req, BEDROCK_MODEL, dep)[0]).encode()
    path = wire_for(dep).target("chat", True, BEDROCK_MODEL)
    creds = Credentials("AKIDBENCH", "bench-secret", None)
    signer = SigV4("bedrock", "us-east-1", lambda: creds)
    headers = {"content-type": "application/json", "accept": "application/vnd.amazon.eventstream"}
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            signer.sign("POST", "bedrock-runtime.us-east-1.amazonaws.com", path, "", headers, body)
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1e6


def claude_code_turn(model: str) -> dict:
    """A whole Claude Code turn as its CLI sends it (tests/fakes/claude_code.py), 20 tokens asked."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.fakes import claude_code

    return {**claude_code.body(model), "max_tokens": 20}


def claude_code_4k(model: str) -> dict:
    """A Claude Code turn cut to about 4 KB (issue 33's native-lane figure): its three system
    blocks, a reminder and a prompt with cache_control, two tools, metadata, thinking."""
    body = claude_code_turn(model)
    body["system"][2]["text"] = body["system"][2]["text"][:600]
    body["messages"][0]["content"][0]["text"] = body["messages"][0]["content"][0]["text"][:560]
    body["tools"] = [{**t, "description": t["description"][:300]} for t in body["tools"][:2]]
    return body


def compare_providers(dur: int, quick: bool, rev: str | None = None, rounds: int = 3,
                      python: str | None = None, fresh: bool = False) -> int:
    """Gateway CPU per streamed request through each provider, interleaved rounds, one gateway:
    chat to three providers, and a 4 KB Claude Code body to Anthropic's Messages API, forwarded
    on the native lane or translated for an OpenAI-shaped upstream. With ``rev``, a gateway on
    that revision's code too (the same config), measured alternately with this tree's; with
    ``python``, this tree run by that interpreter ("new") and by this venv's ("venv"); with
    ``fresh``, the gateways started anew each round."""
    rounds = 1 if quick else rounds
    here = (ROOT, sys.executable)
    if python is not None:
        return _compare_providers({"venv": here, "new": (ROOT, python)}, dur, rounds, quick, fresh)
    if rev is None:
        return _compare_providers({"new": here}, dur, rounds, quick, fresh)
    with worktree(rev) as old:
        return _compare_providers({rev: (old, sys.executable), "new": here}, dur, rounds, quick, fresh)


def _compare_providers(trees: dict[str, tuple[Path, str]], dur: int, rounds: int, quick: bool,
                       fresh: bool = False) -> int:
    """``trees``: by name, a tree and the interpreter that runs it."""
    py = sys.executable
    procs = Procs()
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20, "stream": True,
            "stream_options": {"include_usage": True}}
    cases = {n: ("/v1/chat/completions", {"model": f"bench/{n}", **chat})
             for n in ("openai", "anthropic", "bedrock")}
    cases["messages/native"] = ("/v1/messages", claude_code_4k("bench/anthropic"))
    cases["messages/translated"] = ("/v1/messages", claude_code_4k("bench/openai"))
    cases["messages/agent"] = ("/v1/messages", claude_code_turn("bench/gpt-5"))
    names = tuple(cases)
    runs: dict[tuple[str, str], list[dict]] = {(t, n): [] for t in trees for n in names}
    try:
        up = free_port()
        procs.start(pinned("0", [py, str(PROVIDER_MOCK), "--port", str(up), "--tokens", "20"]), cwd=ROOT)
        cfg = Path(tempfile.mkdtemp()) / "bench.yaml"
        cfg.write_text(providers_yaml(up))
        wait_http(up, "/health")

        def warm(port: int, _: subprocess.Popen[bytes]) -> None:
            for path, body in cases.values():  # each answers the whole stream, then a warm-up
                check_stream(f"http://127.0.0.1:{port}{path}", body)
                wrk(f"http://127.0.0.1:{port}{path}", body, 1, 1, KEY)

        def gateways() -> Gateways:
            return start_gateways(procs, {n: (tree, gw_py, cfg) for n, (tree, gw_py) in trees.items()}, warm)

        gws = gateways()
        for r in range(rounds):
            if fresh and r:
                procs.stop([gw for _, gw in gws.values()])
                gws = gateways()
            for n, (path, body) in cases.items():  # each case on every tree back to back,
                for t in (list(gws) if r % 2 == 0 else list(gws)[::-1]):  # in alternating order
                    port, gw = gws[t]
                    runs[(t, n)].append(wrk(f"http://127.0.0.1:{port}{path}", body, 32, dur, KEY, gw.pid))
    finally:
        procs.stop()
    sign = sign_us(200 if quick else 2000)
    cpu = {k: statistics.median(r["cpu_us"] for r in v) for k, v in runs.items()}
    size, whole = (len(json.dumps(cases[n][1])) for n in ("messages/native", "messages/agent"))
    print(f"\nSwitchyard per provider: streamed chat (20 text deltas + usage), and {size}- and {whole}-byte "
          f"Claude Code bodies to /v1/messages, c=32, {rounds} interleaved round(s) of {dur} s, gateways on "
          f"core 1{' (started anew each round)' if fresh else ''}, wrk + mock upstream on core 0, medians")
    print(f"{'tree':<10}{'provider':<20}{'streams/s':>10}{'CPU/request':>14}{'x openai':>10}{'errors':>8}"
          "   runs (CPU us)")
    for t in trees:
        for n in names:
            rps = statistics.median(r["rps"] for r in runs[(t, n)])
            errs = sum(r["errors"] for r in runs[(t, n)])
            print(f"{t:<10}{n:<20}{rps:>10.0f}{cpu[(t, n)]:>11.0f} us"
                  f"{cpu[(t, n)] / cpu[(t, 'openai')]:>9.2f}x{errs:>8}   "
                  + ", ".join(f"{r['cpu_us']:.0f}" for r in runs[(t, n)]))
    native, translated = cpu[("new", "messages/native")], cpu[("new", "messages/translated")]
    print(f"Anthropic Messages, native lane / translated: {native / translated:.2f}x "
          f"(issue 33's target for the native lane: <= 250 us)")
    for t in trees:
        if t != "new":
            for n in names:
                new = [r["cpu_us"] for r in runs[("new", n)]]
                print(f"new / {t}, {n}: {cpu[('new', n)] / cpu[(t, n)]:.3f}x, "
                      f"{paired(new, [r['cpu_us'] for r in runs[(t, n)]])}")
    print(f"SigV4 signing of the Converse request, best of 5: {sign:.1f} us (target <= 30 us)")
    return 0


def check_stream(url: str, body: dict) -> None:
    import urllib.request

    req = urllib.request.Request(url, json.dumps(body).encode(), {
        "content-type": "application/json", "authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
    if url.endswith("/messages"):  # Anthropic's events
        ended = "event: message_stop" in text
    else:
        ended = '"finish_reason":"stop"' in text.replace(" ", "") and "[DONE]" in text
    if not ended or "w19" not in text:
        raise RuntimeError(f"{body['model']}: the gateway's stream is not the mock's whole answer:\n"
                           f"{text[:2000]}")


if __name__ == "__main__":
    sys.exit(main())
