"""What the admin API changes outlives a restart of the default install (``store.url: sqlite://``,
as config.example.yaml and the slim image's config say): a key made with POST /admin/keys still
works, a config key revoked with POST /admin/keys/<id>/revoke stays revoked, a team made with PUT
/admin/teams keeps its limits, a console session stays signed in. Real ``switchyard serve``
processes, stopped with SIGTERM and started again on the same file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import free_port
from tests.gateway.conftest import MASTER, upstream_model
from tests.http.test_server import running

STRICT = "sk-strict-config-key-0001"
ADMIN = {"authorization": f"Bearer {MASTER}"}
CHAT = {"model": "v/m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def config(tmp_path: Path, upstream_url: str, store: str) -> Path:
    p = tmp_path / "switchyard.yaml"
    p.write_text(yaml.safe_dump({
        "server": {"port": free_port()}, "store": {"url": store}, "master_key": MASTER,
        "models": [upstream_model("v/m", upstream_url)], "teams": [{"name": "t"}],
        "keys": [{"id": "strict", "team": "t", "key": STRICT}]}))
    return p


async def chat(port: int, key: str) -> int:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
        r = await c.post("/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer {key}"})
        return r.status_code


async def stopped_output(proc: Any) -> list[dict[str, Any]]:
    proc.terminate()
    assert await proc.wait() == 0
    return [json.loads(line) for line in (await proc.stdout.read()).decode().splitlines()
            if line.startswith("{")]


async def test_keys_teams_revocations_and_sessions_survive_a_restart(
        upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("SWITCHYARD_HOME", str(home))  # bare sqlite:// lives here
    p = config(tmp_path, upstream.url, "sqlite://")
    async with running(p) as (proc, port):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
            made = await c.post("/admin/keys", json={"team": "t", "id": "made"}, headers=ADMIN)
            assert made.status_code == 201, made.text
            new_key = made.json()["key"]
            assert (await c.post("/admin/keys/strict/revoke", headers=ADMIN)).status_code == 200
            r = await c.put("/admin/teams/later", json={"limits": {"rpm": 7}}, headers=ADMIN)
            assert r.status_code == 200, r.text
            assert (await c.post("/ui/login", data={"master_key": MASTER})).status_code == 303
            cookies = dict(c.cookies)
        assert (await chat(port, new_key), await chat(port, STRICT)) == (200, 401)
        first = await stopped_output(proc)
    started = next(e for e in first if e["event"] == "switchyard started")
    assert started["admin_state"] == str(home / "state.db")
    assert not any("are lost when the gateway stops" in e["event"] for e in first)
    assert (home / "state.db").stat().st_mode & 0o777 == 0o600

    async with running(p) as (proc, port):
        assert (await chat(port, new_key), await chat(port, STRICT)) == (200, 401)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", cookies=cookies) as c:
            team = (await c.get("/admin/teams/later", headers=ADMIN)).json()
            assert team["limits"]["rpm"] == 7
            keys = {k["id"]: k for k in (await c.get("/admin/keys", headers=ADMIN)).json()["data"]}
            assert keys["strict"]["revoked"] and not keys["made"]["revoked"]
            page = await c.get("/ui")  # the session made before the restart, no master key sent
            assert page.status_code == 200 and 'id="page-overview"' in page.text
            assert "state-note" not in page.text
        await stopped_output(proc)
    assert new_key not in (home / "state.db").read_bytes().decode("latin-1")  # only its digest


async def test_memory_says_on_the_start_line_and_in_the_console_that_nothing_is_kept(
        upstream, tmp_path: Path) -> None:
    p = config(tmp_path, upstream.url, "memory://")
    async with running(p) as (proc, port):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
            assert (await c.post("/ui/login", data={"master_key": MASTER})).status_code == 303
            page = (await c.get("/ui")).text
        out = await stopped_output(proc)
    assert 'id="state-note"' in page and "are lost when the gateway stops" in page
    started = next(e for e in out if e["event"] == "switchyard started")
    assert started["admin_state"] == "not kept"
    warned = [e for e in out if "are lost when the gateway stops" in e["event"]]
    assert len(warned) == 1 and warned[0]["level"] == "warning"


def test_workers_refuse_sqlite_because_counters_are_per_process(tmp_path: Path) -> None:
    """sqlite:// shares its file between processes (WAL), but rate limits, concurrency and quotas
    are each process's own: N workers would allow N times every limit."""
    import subprocess
    import sys

    from tests.http.test_server import ROOT

    p = config(tmp_path, "http://127.0.0.1:9/v1", f"sqlite:///{tmp_path}/s.db")
    done = subprocess.run([sys.executable, "-m", "switchyard", "serve", "--config", str(p), "--workers", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--workers 2 needs a shared store: with sqlite://" in done.stderr and "redis://" in done.stderr
