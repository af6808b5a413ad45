"""Hot reload through the real command: ``switchyard serve --pid-file``, then SIGHUP or
``switchyard reload``. A request in flight finishes on the old config, the next ones see the new,
a bad file changes nothing and the log says why, unchanged deployments keep their connection
pool, memory:// counters survive; under --workers every worker reloads."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.conftest import free_port
from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import KEY, upstream_model
from tests.gateway.helpers import sse_events
from tests.http.test_server import ROOT, children, running


def config(upstream_url: str, *models: str, port: int, store: str = "memory://",
           **key: Any) -> dict[str, Any]:
    return {"server": {"port": port, "shutdown_grace": 5}, "store": {"url": store},
            "models": [upstream_model(m, upstream_url) for m in models],
            "teams": [{"name": "t"}], "keys": [{"id": "k1", "team": "t", "key": KEY, **key}]}


def reload_cmd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "switchyard", "reload", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


async def log_until(proc: asyncio.subprocess.Process, event: str, count: int = 1) -> list[dict[str, Any]]:
    """The server's log lines up to the ``count``-th line that starts with ``event`` (30 s at most)."""
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(30):
        while sum(1 for e in seen if e.get("event", "").startswith(event)) < count:
            line = await proc.stdout.readline()  # type: ignore[union-attr]
            assert line, f"the server exited before logging {event!r}: {seen}"
            if line.startswith(b"{"):
                seen.append(json.loads(line))
    return seen


async def models(client: httpx.AsyncClient) -> set[str]:
    r = await client.get("/v1/models")
    assert r.status_code == 200, r.text
    return {m["id"] for m in r.json()["data"]}


async def test_sighup_swaps_the_config_between_requests(upstream, tmp_path: Path) -> None:
    port = free_port()
    path, pid_file = tmp_path / "c.yaml", tmp_path / "sy.pid"
    path.write_text(yaml.safe_dump(config(upstream.url, "v/m", "v/old", port=port, limits={"rpm": 4})))
    upstream.script = [Behaviour(), Behaviour(chunk_delay=0.2)]  # the stream: 16 events over ~3 s
    async with (running(path, "--pid-file", str(pid_file)) as (proc, _),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                  headers={"authorization": f"Bearer {KEY}"}) as client):
        await log_until(proc, "model ready", 2)
        assert int(pid_file.read_text()) == proc.pid
        first = await client.post("/v1/completions", json={"model": "v/m", "prompt": "a", "max_tokens": 2})
        assert first.status_code == 200
        async with client.stream("POST", "/v1/completions",
                                 json={"model": "v/old", "prompt": "hi", "stream": True}) as r:
            lines = r.aiter_lines()
            head = await anext(lines)
            # v/old goes, v/new comes, v/m stays as it was.
            path.write_text(yaml.safe_dump(config(upstream.url, "v/m", "v/new", port=port,
                                                  limits={"rpm": 4})))
            done = reload_cmd("--pid-file", str(pid_file), "--config", str(path))
            assert done.returncode == 0, done.stderr
            lines_seen = await log_until(proc, "config reloaded")
            reloaded = lines_seen[-1]
            assert reloaded["kept_deployments"] == ["v/m/d1"] and reloaded["store_kept"] is True
            assert reloaded["changed"] == ["models"]
            assert await models(client) == {"v/m", "v/new"}
            rest = [line async for line in lines]  # the stream in flight finishes on the old config
        events = sse_events("\n".join([head, *rest]))
        assert events[-1] == "[DONE]" and len(events) == 17
        again = await client.post("/v1/completions", json={"model": "v/m", "prompt": "b", "max_tokens": 2})
        assert again.status_code == 200
        # v/m's deployment kept its pool: the same connection to the upstream as before.
        assert upstream.requests[-1].peer_port == upstream.requests[0].peer_port
        # memory:// counters survived the swap: the key's 4 a minute are spent (first, stream, again).
        third = await client.post("/v1/completions", json={"model": "v/new", "prompt": "c"})
        assert third.status_code == 200
        limited = await client.post("/v1/completions", json={"model": "v/new", "prompt": "d"})
        assert limited.status_code == 429, limited.text
        # So did /metrics' counters: the first request and the stream (v/old's) began before the swap.
        scraped = (await client.get("/metrics")).text
        served = {line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
                  for line in scraped.splitlines() if line.startswith("switchyard_requests_total{")}
        assert sum(n for labels, n in served.items() if 'status_class="2xx"' in labels) == 4, served
        assert sum(n for labels, n in served.items() if 'model="v/old"' in labels) == 1, served

        # A bad file changes nothing, and the log says why.
        good = path.read_text()
        path.write_text(good + "store: {url: memory://}\n")  # a repeated top-level key
        proc.send_signal(signal.SIGHUP)
        refused = (await log_until(proc, "reload refused"))[-1]
        assert refused["level"] == "error"
        assert refused["event"].startswith(f"reload refused, the running config is unchanged: {path}: "
                                           "store: key repeats (lines "), refused
        assert await models(client) == {"v/m", "v/new"}
        # switchyard reload --config checks first and signals nothing when the file is bad.
        bad = reload_cmd("--pid-file", str(pid_file), "--config", str(path))
        assert bad.returncode == 2 and "store: key repeats" in bad.stderr
        assert "nothing signalled" in bad.stderr
        proc.terminate()
        assert await proc.wait() == 0
    assert not pid_file.exists()


async def test_a_reload_keeps_the_memory_cache(upstream, tmp_path: Path) -> None:
    """On memory:// the cached answers live in the process: a reload that keeps the store keeps
    them too (it used to start an empty cache)."""
    port = free_port()
    path = tmp_path / "c.yaml"
    cfg = config(upstream.url, "v/m", port=port)
    cfg["models"][0]["cache"] = {"mode": "exact", "ttl": 60}
    path.write_text(yaml.safe_dump(cfg))
    body = {"model": "v/m", "prompt": "a", "max_tokens": 2, "temperature": 0}
    async with (running(path) as (proc, _),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                  headers={"authorization": f"Bearer {KEY}"}) as client):
        await log_until(proc, "model ready")
        first = await client.post("/v1/completions", json=body)
        assert first.status_code == 200 and first.headers["x-switchyard-cache"] == "stored"
        cfg["models"].append(upstream_model("v/new", upstream.url))
        path.write_text(yaml.safe_dump(cfg))
        proc.send_signal(signal.SIGHUP)
        assert (await log_until(proc, "config reloaded"))[-1]["store_kept"] is True
        again = await client.post("/v1/completions", json=body)
        assert again.status_code == 200 and again.headers["x-switchyard-cache"] == "hit"
        assert again.json()["choices"] == first.json()["choices"]
        assert len(upstream.requests) == 1
        proc.terminate()
        assert await proc.wait() == 0


async def test_reload_with_a_pid_file_waits_for_the_verdict_and_fails_when_refused(
        upstream, tmp_path: Path) -> None:
    """It exited 0 whatever the server made of the file; the server's answer now comes back
    through a file beside the pid file. An empty config file (issue 28, item 4) is refused."""
    port = free_port()
    path, pid_file = tmp_path / "c.yaml", tmp_path / "sy.pid"
    good = yaml.safe_dump(config(upstream.url, "v/m", port=port))
    path.write_text(good)
    async with (running(path, "--pid-file", str(pid_file)) as (proc, _),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                  headers={"authorization": f"Bearer {KEY}"}) as client):
        for bad, says in (("", "no models, teams or keys"),
                          (good + "store: {url: memory://}\n", "store: key repeats")):
            path.write_text(bad)
            done = reload_cmd("--pid-file", str(pid_file))  # no --config: the server itself decides
            assert done.returncode == 1, (done.stdout, done.stderr)
            assert f"process {proc.pid} did not reload its config" in done.stderr
            assert "reload refused, the running config is unchanged" in done.stderr and says in done.stderr
            assert str(path) in done.stderr
            assert await models(client) == {"v/m"}
        path.write_text(yaml.safe_dump(config(upstream.url, "v/m", "v/new", port=port)))
        done = reload_cmd("--pid-file", str(pid_file))
        assert done.returncode == 0, done.stderr
        assert f"process {proc.pid} reloaded its config" in done.stdout
        assert await models(client) == {"v/m", "v/new"}
        proc.terminate()
        assert await proc.wait() == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]  # pid and verdict files gone


def test_reload_says_when_no_verdict_comes(tmp_path: Path) -> None:
    """A process that does not answer (here: one that ignores SIGHUP) is not taken as a success."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                                "signal.signal(signal.SIGHUP, signal.SIG_IGN); time.sleep(60)"])
    try:
        pid_file = tmp_path / "sy.pid"
        pid_file.write_text(f"{sleeper.pid}\n")
        done = reload_cmd("--pid-file", str(pid_file), "--wait", "0.5")
        assert done.returncode == 1 and "no verdict from the server within 0.5 s" in done.stderr
    finally:
        sleeper.kill()
        sleeper.wait()


async def test_every_worker_reloads_and_a_bad_file_reaches_none(upstream, redis_url, tmp_path: Path) -> None:
    port = free_port()
    path, pid_file = tmp_path / "c.yaml", tmp_path / "sy.pid"
    path.write_text(yaml.safe_dump(config(upstream.url, "v/m", port=port, store=redis_url)))
    async with (running(path, "--workers", "2", "--pid-file", str(pid_file)) as (proc, _),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                  limits=httpx.Limits(max_keepalive_connections=0),
                                  headers={"authorization": f"Bearer {KEY}"}) as client):
        assert len(children(proc.pid)) >= 2
        await log_until(proc, "model ready", 2)
        path.write_text("models: [")
        proc.send_signal(signal.SIGHUP)
        refused = (await log_until(proc, "reload refused"))[-1]
        assert refused["event"].startswith(f"reload refused, the running config is unchanged: {path}: "
                                           "not valid YAML"), refused
        # The supervisor's own check refuses it: the reload command says so.
        done = reload_cmd("--pid-file", str(pid_file))
        assert done.returncode == 1 and "not valid YAML" in done.stderr, done.stderr
        path.write_text(yaml.safe_dump(config(upstream.url, "v/m", "v/new", port=port, store=redis_url)))
        done = reload_cmd("--pid-file", str(pid_file))  # waits for both workers' verdicts
        assert done.returncode == 0, done.stderr
        assert len(list(tmp_path.glob("sy.pid.reload.*"))) == 2
        await log_until(proc, "config reloaded", 2)  # one line from each worker
        # Every worker (a new connection each time, so both answer) serves the new model.
        codes = [(await client.post("/v1/completions", json={"model": "v/new", "prompt": "x",
                                                              "max_tokens": 1})).status_code
                 for _ in range(8)]
        assert codes == [200] * 8
        proc.terminate()
        assert await proc.wait() == 0


def test_a_reload_may_not_change_an_engine_the_supervisor_hosts() -> None:
    """Under --workers the engine was loaded by the supervisor from its first config: the
    supervisor (and each worker) refuses a file that changes it, and says to restart."""
    from switchyard.core.config import parse_config
    from switchyard.http.reload import engine_change

    def cfg(**engine: Any) -> Any:
        return parse_config({"models": [
            {"name": "local/m", "deployments": [{"name": "e", "backend": "engine", "engine": engine}]},
            upstream_model("v/m", "http://127.0.0.1:9/v1")]})

    assert engine_change(cfg(max_batch=4), cfg(max_batch=4)) is None
    assert "local/m/e changed" in (engine_change(cfg(max_batch=4), cfg(max_batch=8)) or "")
    assert "restart" in (engine_change(cfg(max_batch=4), cfg(max_batch=8)) or "")

    def embedder(**engine: Any) -> Any:  # hosted by the supervisor too
        return parse_config({"models": [{"name": "local/emb", "deployments": [
            {"name": "x", "backend": "embedder", "engine": engine}]}]})

    assert engine_change(embedder(max_batch=4), embedder(max_batch=4)) is None
    assert "embedder deployment local/emb/x changed" in (
        engine_change(embedder(max_batch=4), embedder(max_batch=8)) or "")
