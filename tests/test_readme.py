"""Every command the README prints works as printed against ``make serve``: the real gateway on
the Makefile's config (config.example.yaml: SmolLM2 on the built-in engine and the embedder),
started as ``make serve`` starts it, on a free port. The README's ``curl`` commands (and those in
the config file's header) and its Python blocks run with only the port rewritten; each must
answer 2xx with a body. The engine is the real SmolLM2, hence ``slow``."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
PRINTED = "localhost:8080"  # the address the README's commands name


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)


def curls(text: str) -> list[str]:
    """The curl commands of ``text``'s bash blocks, continuation lines joined."""
    out = []
    for block in blocks(text, "bash"):
        joined = re.sub(r"\\\n\s*", " ", block)
        out += [ln.strip() for ln in joined.splitlines() if ln.strip().startswith("curl ")]
    return out


def config_curls(text: str) -> list[str]:
    """The curl commands in the config file's header comment."""
    joined = re.sub(r"\\\n#\s*", " ", text)
    return [m.strip() for m in re.findall(r"^#\s+(curl .*)$", joined, re.M)]


def test_the_readme_names_its_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    found = curls(readme)
    assert len(found) >= 3 and any("/completion " in c for c in found), found
    assert blocks(readme, "python")
    assert len(config_curls(make_serve_config().read_text())) >= 2


def make_serve_config() -> Path:
    found = re.search(r"^CONFIG \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert found is not None
    serve = re.search(r"^serve:.*\n\t(.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert serve is not None and "serve --config $(CONFIG)" in serve[1]
    return ROOT / found[1]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """``switchyard serve --config <make serve's config>`` on a free port, once its models are ready
    (the first start converts the GGUF: minutes on a busy machine)."""
    port = free_port()
    home = tmp_path_factory.mktemp("home")
    log = open(home / "serve.log", "wb")  # noqa: SIM115 (kept open for the server's life)
    env = {**os.environ, "SWITCHYARD_HOME": str(home)}  # master_key: auto is made here
    argv = [sys.executable, "-m", "switchyard", "serve", "--config", str(make_serve_config()),
            "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 900
        while True:
            if proc.poll() is not None:
                pytest.fail(f"switchyard serve exited {proc.returncode}: "
                            f"{(home / 'serve.log').read_text()[-2000:]}")
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5)
                if r.status_code == 200:
                    break
                if "failed to load" in r.text:
                    pytest.fail(f"a model failed to load: {r.text}")
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"not ready within 900 s: {(home / 'serve.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # (the engine processes are in its session)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def commands() -> list[str]:
    return curls((ROOT / "README.md").read_text()) + config_curls(make_serve_config().read_text())


@pytest.mark.parametrize("command", commands())
def test_each_curl_works_as_printed(gateway: int, command: str) -> None:
    assert PRINTED in command, command
    argv = shlex.split(command.replace(PRINTED, f"127.0.0.1:{gateway}"))
    # --fail-with-body: a 4xx or 5xx exits 22 (the README's `curl -s` would print it and exit 0).
    done = subprocess.run([argv[0], "--fail-with-body", "--max-time", "300", *argv[1:]],
                          capture_output=True, text=True, timeout=330)
    assert done.returncode == 0, (command, done.returncode, done.stdout[-1000:], done.stderr[-500:])
    body = done.stdout.strip()
    if body.startswith("data:"):  # a stream: every event JSON, one with text
        events = [json.loads(ln[5:]) for ln in body.splitlines() if ln.startswith("data:") and ln[5:].strip()]
        assert events and any(e.get("choices") or e.get("text") or e.get("content") for e in events), body
    else:
        answer = json.loads(body)
        assert "error" not in answer and answer, body


@pytest.mark.parametrize("index", range(len(blocks((ROOT / "README.md").read_text(), "python"))))
def test_each_python_block_works_as_printed(gateway: int, index: int) -> None:
    code = blocks((ROOT / "README.md").read_text(), "python")[index]
    assert PRINTED in code
    done = subprocess.run([sys.executable, "-c", code.replace(PRINTED, f"127.0.0.1:{gateway}")],
                          capture_output=True, text=True, timeout=330, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip(), "it printed nothing"
