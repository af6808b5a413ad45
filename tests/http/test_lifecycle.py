"""Starting up, as ``switchyard serve`` does it: a taken port fails before "started" is said, each
model logs when it is ready and how long it took, and OpenAI-family tokenizers are loaded before
/ready says 200 (not on the first request)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from switchyard.policies import tokens
from tests.conftest import free_port
from tests.gateway.conftest import base_config, serve, upstream_model
from tests.http.test_server import ROOT, running


def test_a_taken_port_fails_before_started_is_said(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        p = tmp_path / "c.yaml"
        p.write_text(yaml.safe_dump({"server": {"port": port},
                                     "models": [upstream_model("v/m", "http://127.0.0.1:9/v1")]}))
        done = subprocess.run([sys.executable, "-m", "switchyard", "serve", "--config", str(p)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert [ln["event"] for ln in lines] == [f"cannot listen on 127.0.0.1:{port}: Address already in use"]
    assert lines[0]["level"] == "error"


async def test_each_model_logs_when_it_is_ready(upstream, tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({
        "server": {"port": free_port()},
        "models": [upstream_model("openai/gpt-4o-mini", upstream.url), upstream_model("v/m", upstream.url)]}))
    async with running(p) as (proc, _):
        proc.terminate()
        assert await proc.wait() == 0
        out = (await proc.stdout.read()).decode()  # type: ignore[union-attr]
    events = [json.loads(line) for line in out.splitlines()]
    names = [e["event"] for e in events]
    assert names.index("switchyard started") < names.index("model ready")
    ready = {e["model"]: e for e in events if e["event"] == "model ready"}
    assert ready.keys() == {"openai/gpt-4o-mini", "v/m"}
    assert all(0 <= e["seconds"] < 60 and e["deployments"] == ["d1"] for e in ready.values())


async def test_openai_family_tokenizers_load_before_ready(upstream, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_encodings", {})  # as in a fresh process
    config = base_config([upstream_model("openai/gpt-4o-mini", upstream.url),
                          upstream_model("legacy/m", upstream.url, model="gpt-3.5-turbo-instruct"),
                          upstream_model("v/m", upstream.url)])
    async with serve(config) as client:
        assert (await client.get("/ready")).status_code == 200
        assert set(tokens._encodings) == {"o200k_base", "cl100k_base"}


async def test_master_key_auto_is_made_once_kept_private_and_opens_the_console(
        upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``master_key: auto`` (what config.example.yaml and so ``make serve`` use): a random key made
    on first start in a 0600 file, the same on the next start; the log names the console and the
    file, never the key."""
    home = tmp_path / "home"
    monkeypatch.setenv("SWITCHYARD_HOME", str(home))
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"server": {"port": free_port()}, "master_key": "auto",
                                 "models": [upstream_model("v/m", upstream.url)]}))
    keys, outs = [], []
    for _ in range(2):
        async with running(p) as (proc, port):
            key = (home / "master_key").read_text().strip()
            keys.append(key)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                assert (await client.get("/admin/keys", headers={"authorization": f"Bearer {key}"})
                        ).status_code == 200
                assert (await client.get("/admin/keys", headers={"authorization": "Bearer auto"})
                        ).status_code == 401
                assert (await client.get("/ui")).status_code == 200
            proc.terminate()
            await proc.wait()
            outs.append((await proc.stdout.read()).decode())  # type: ignore[union-attr]
    assert keys[0] == keys[1] and len(keys[0]) > 40
    assert (home / "master_key").stat().st_mode & 0o777 == 0o600
    started = next(json.loads(line) for line in outs[0].splitlines() if "switchyard started" in line)
    assert started["console"].endswith("/ui") and started["master_key_file"] == str(home / "master_key")
    assert not any(keys[0] in out for out in outs)
