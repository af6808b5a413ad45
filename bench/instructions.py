"""Machine instructions the gateway executes per request, counted by valgrind: old code and new.

    .venv/bin/python bench/instructions.py [--against REV] [--requests 2000] [--concurrency 8]
                                           [--rounds 1] [--store redis --limits] [--case NAME ...]

Time per request on a shared 2-core VM moves 10-20% from round to round, so ``bench/overhead.py``
cannot tell a 2% step from noise. An instruction count does not depend on what else the host
runs: the same code and load give the same count to within about 1%. This runs each gateway
under callgrind (``apt-get install valgrind``) with instrumentation off while it starts, turns it
on, warms each case up, zeroes the counters, sends ``--requests`` requests at ``--concurrency``
from an asyncio client in this process, and dumps the counters: instructions per request. The
upstream mocks run natively. An instruction is not a microsecond (a cache miss or a system call
costs more than its count says), so confirm a step that counts a lot with ``bench/overhead.py``.

Code whose requests leave reference cycles (the gateway's did until 2026-11-29) pays for a run of
the cyclic garbage collector every thousand or so requests, several million instructions at once:
a window of a few hundred requests holds one run or none, 1-2% either way, and two trees may fall
differently. Hence 2,000 requests a case, where a run is spread over all of them; the rounds of one
tree then agree within 0.1%, so one round each is the default.

Cases, each against the mock that answers it at once:
  completion   a non-streamed completion (the shared rig's mock)
  stream       a 20-chunk chat stream (the shared rig's mock)
  anthropic    a streamed chat for Claude: Anthropic's named events (bench/provider_mock.py)
  native       a 4 KB Claude Code body to /v1/messages, forwarded on Anthropic's native lane

``--against REV`` counts REV's code too (a worktree of its own), the trees alternately for
``--rounds`` rounds, and prints new/old per case. ``--store redis --limits``: a redis-server of
their own (natively) and the key's four limits, as ``bench/overhead.py`` has them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import (  # this directory's own module
    KEY,
    LIMITS,
    MOCK,
    PROVIDER_MOCK,
    ROOT,
    Procs,
    claude_code_4k,
    free_port,
    pinned,
    wait_http,
    worktree,
)

sys.path.insert(0, str(ROOT))
from tests.conftest import wait_for_redis  # the checkout's own tests package

STREAM = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20, "stream": True,
          "stream_options": {"include_usage": True}}
CASES: dict[str, tuple[str, dict]] = {
    "completion": ("/v1/completions",
                   {"model": "mock/gpt", "prompt": "Say this is a test", "max_tokens": 16}),
    "stream": ("/v1/chat/completions", {"model": "mock/gpt", **STREAM}),
    "anthropic": ("/v1/chat/completions", {"model": "bench/anthropic", **STREAM}),
    "native": ("/v1/messages", claude_code_4k("bench/anthropic")),
}


def config_yaml(mock: int, provider_mock: int, store: str, limits: bool) -> str:
    # A gateway under callgrind runs some 50 times slower: the store's 0.25 s would time out.
    return f"""
store: {{url: '{store}', timeout: 30}}
models:
  - name: mock/gpt
    deployments: [{{name: d0, backend: upstream, dialect: openai, base_url: 'http://127.0.0.1:{mock}/v1'}}]
  - name: bench/anthropic
    deployments: [{{name: a, provider: anthropic, backend: upstream, base_url: 'http://127.0.0.1:{provider_mock}',
                   api_key: sk-ant-bench, model: claude-bench}}]
teams: [{{name: bench}}]
keys: [{{id: bench, team: bench, key: {KEY}{", limits: " + LIMITS if limits else ""}}}]
"""


def request_bytes(path: str, body: dict) -> bytes:
    raw = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer {KEY}\r\ncontent-length: {len(raw)}\r\n\r\n").encode() + raw


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, wire: bytes) -> None:
    """One request on a kept-alive connection, its whole answer read (content-length or chunked)."""
    writer.write(wire)
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b" ", 2)[1]
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        body = await reader.readuntil(b"0\r\n\r\n")
        while not body.endswith(b"\r\n0\r\n\r\n") and body != b"0\r\n\r\n":  # "...0\r\n\r\n" inside data
            body += await reader.readuntil(b"0\r\n\r\n")
    else:
        length = int(lower.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
        body = await reader.readexactly(length)
    if status != b"200":
        raise RuntimeError(f"the gateway answered {status.decode()}: {body[:500]!r}")


async def load(port: int, wire: bytes, n: int, conns: int) -> None:
    """``n`` requests over ``conns`` kept-alive connections."""
    async def one(m: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _ in range(m):
                await _exchange(reader, writer, wire)
        finally:
            writer.close()

    await asyncio.gather(*(one(n // conns + (1 if i < n % conns else 0)) for i in range(conns)))


class Counted:
    """A gateway under callgrind: its counters zeroed and dumped on request."""

    def __init__(self, procs: Procs, tree: Path, cfg: Path, out: Path) -> None:
        self.port = free_port()
        self.out = out
        self.proc = procs.start(pinned("1", [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}/cg.out",
            sys.executable, "-m", "switchyard", "serve", "--config", str(cfg), "--port", str(self.port)]),
            cwd=tree)
        wait_http(self.port, "/health", timeout=300)
        self._control("-i", "on")

    def _control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.proc.pid)], check=True, capture_output=True,
                       timeout=120)

    def per_request(self, path: str, body: dict, n: int, conns: int) -> float:
        wire = request_bytes(path, body)
        asyncio.run(load(self.port, wire, max(conns * 4, 20), conns))  # warm-up
        time.sleep(0.2)
        self._control("-z")
        asyncio.run(load(self.port, wire, n, conns))
        self._control("-d")
        dump = max(self.out.glob("cg.out.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
        for line in dump.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1]) / n
        raise RuntimeError(f"no summary line in {dump}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", metavar="REV", help="count REV's code too, alternately")
    ap.add_argument("--requests", type=int, default=2000, help="requests counted per case and round")
    ap.add_argument("--concurrency", type=int, default=8, help="connections the client keeps busy")
    ap.add_argument("--rounds", type=int, default=1, help="rounds per tree (each a fresh gateway)")
    ap.add_argument("--store", choices=("memory", "redis"), default="memory")
    ap.add_argument("--limits", action="store_true", help="the key has four limits (never reached)")
    ap.add_argument("--case", action="append", choices=tuple(CASES), help="cases to count (default: all)")
    args = ap.parse_args()
    for tool in ("valgrind", "callgrind_control"):
        if not shutil.which(tool):
            sys.exit(f"bench/instructions.py needs {tool}: apt-get install valgrind")
    if not MOCK.exists():
        sys.exit(f"bench/instructions.py needs the mock upstream at {MOCK}")
    names = args.case or list(CASES)
    if args.against:
        with worktree(args.against) as old:
            return count({args.against: old, "new": ROOT}, names, args)
    return count({"new": ROOT}, names, args)


def count(trees: dict[str, Path], names: list[str], args: argparse.Namespace) -> int:
    procs = Procs()
    runs: dict[tuple[str, str], list[float]] = {(t, n): [] for t in trees for n in names}
    try:
        mock, provider_mock = free_port(), free_port()
        procs.start(pinned("0", [sys.executable, str(MOCK), "--port", str(mock)]))
        procs.start(pinned("0", [sys.executable, str(PROVIDER_MOCK), "--port", str(provider_mock),
                                 "--tokens", "20"]))
        store = "memory://"
        if args.store == "redis":
            rport = free_port()
            procs.start(pinned("0", ["redis-server", "--port", str(rport), "--save", "",
                                     "--appendonly", "no"]))
            store = f"redis://127.0.0.1:{rport}/0"
            wait_for_redis(rport, timeout=30.0)
        for p in (mock, provider_mock):
            wait_http(p, "/health")
        cfg = Path(tempfile.mkdtemp()) / "bench.yaml"
        cfg.write_text(config_yaml(mock, provider_mock, store, args.limits))
        for r in range(args.rounds):
            for t in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
                with tempfile.TemporaryDirectory() as out:
                    gw = Counted(procs, trees[t], cfg, Path(out))
                    try:
                        for n in names:
                            path, body = CASES[n]
                            runs[(t, n)].append(gw.per_request(path, body, args.requests, args.concurrency))
                    finally:
                        procs.stop([gw.proc])
    finally:
        procs.stop()
    print(f"\nInstructions per request (callgrind), {args.requests} requests at c={args.concurrency} "
          f"per case and round, {args.rounds} round(s), store {store.split(':', 1)[0]}"
          f"{' with four limits' if args.limits else ''}; medians, then each round's")
    for n in names:
        line = "  ".join(f"{t} {statistics.median(runs[(t, n)]):>10,.0f}" for t in trees)
        each = "; ".join(f"{t} " + ", ".join(f"{x:,.0f}" for x in runs[(t, n)]) for t in trees)
        ratio = ""
        if len(trees) == 2:
            old, new = (statistics.median(runs[(t, n)]) for t in trees)
            ratio = f"  new/old {new / old:.3f}x"
        print(f"{n:<12}{line}{ratio}   ({each})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
