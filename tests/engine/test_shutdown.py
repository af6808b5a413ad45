"""Stopping a served gateway is quiet: a signal to its whole process group (Ctrl-C in a terminal
sends SIGINT to the foreground group; ``kill -TERM -PGID`` and some service managers signal every
process) stops it without a traceback from the engine's process and without the supervisor
restarting the engine it is shutting down."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys

import httpx
import pytest
import yaml

from tests.conftest import free_port
from tests.engine.test_host import engine_processes
from tests.gateway.conftest import KEY


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_a_signal_to_the_process_group_stops_the_engine_quietly(sig, tiny_dir, redis_url, tmp_path):
    team = f"quiet{os.getpid()}"
    port = free_port()
    engine = {"path": str(tiny_dir), "threads": 1, "max_batch": 2}
    cfg = {"server": {"host": "127.0.0.1", "port": port, "shutdown_grace": 5},
           "store": {"url": redis_url},
           "models": [{"name": "local/tiny", "deployments": [
               {"name": "tiny", "backend": "engine", "engine": engine}]}],
           "teams": [{"name": team}], "keys": [{"id": "k1", "team": team, "key": KEY}]}
    path = tmp_path / "switchyard.yaml"
    path.write_text(yaml.safe_dump(cfg))
    # its own process group, as a shell gives a foreground job
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "switchyard", "serve", "--config", str(path), start_new_session=True,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                     headers={"authorization": f"Bearer {KEY}"}) as client:
            for _ in range(600):
                assert proc.returncode is None, (await proc.stdout.read()).decode()  # type: ignore[union-attr]
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/ready")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
            else:
                pytest.fail("the engine did not load in 60 s")
            r = await client.post("/v1/completions", json={"model": "local/tiny", "prompt": "Hello",
                                                           "max_tokens": 4, "temperature": 0})
            assert r.status_code == 200, r.text
        [engine_pid] = engine_processes(proc.pid)
        os.killpg(proc.pid, sig)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    text = out.decode()
    assert "Traceback" not in text, text
    assert "KeyboardInterrupt" not in text, text
    assert "restarting" not in text, text
    assert proc.returncode == 0, text
    with pytest.raises(ProcessLookupError):  # the engine went with it
        os.kill(engine_pid, 0)
