"""The Codex command-line client itself (npm ``@openai/codex``, unmodified), run headless with
``codex exec`` against the gateway as a custom model provider (``wire_api = "responses"``), in
front of an OpenAI-dialect loopback upstream. Codex sends its whole request (40 KB: function tools,
a ``namespace`` tool, the hosted ``web_search``, ``reasoning``, ``include``, ``client_metadata``,
developer messages) to ``/v1/responses``; the upstream must receive a plain chat completion and
Codex must print what the upstream said. Offline: Codex talks to nothing but the gateway."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

from tests.clients.cli import CODEX, CODEX_VERSION
from tests.fakes.upstream import Behaviour, FakeUpstream
from tests.gateway.conftest import KEY, base_config, serve, upstream_model

# Where `make test` installs it (the user's shared npm cache: tests/clients/cli.py), else
# $SWITCHYARD_CODEX or PATH.


def codex_binary() -> str:
    found = os.environ.get("SWITCHYARD_CODEX") or (str(CODEX) if CODEX.exists() else shutil.which("codex"))
    if not found:
        pytest.fail("this test needs the Codex CLI: `make codex` installs it (npm install "
                    f"@openai/codex@{CODEX_VERSION} into {CODEX.parents[2]}), or set SWITCHYARD_CODEX "
                    "to its path",
                    pytrace=False)
    return found


async def test_codex_exec_through_the_gateway(tmp_path) -> None:
    codex = codex_binary()
    async with FakeUpstream(default=Behaviour(text="hello from the gateway")) as upstream, \
            serve(base_config([upstream_model("vendor/gpt", upstream.url)], router={"retries": 0})) as gw:
        home = tmp_path / "codex-home"
        home.mkdir()
        (home / "config.toml").write_text(
            'model = "vendor/gpt"\nmodel_provider = "switchyard"\n\n[model_providers.switchyard]\n'
            f'name = "Switchyard"\nbase_url = "{gw.base_url}/v1"\nenv_key = "SWITCHYARD_KEY"\n'
            'wire_api = "responses"\n')
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "CODEX_HOME": str(home),
               "SWITCHYARD_KEY": KEY, "NO_COLOR": "1"}
        proc = await asyncio.create_subprocess_exec(
            codex, "exec", "--skip-git-repo-check", "say hi", cwd=tmp_path, env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 120)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            pytest.fail("codex exec did not finish within 120 s")
    text = out.decode() + err.decode()
    assert proc.returncode == 0, text[-3000:]
    assert "hello from the gateway" in out.decode(), text[-3000:]
    (sent,) = [r for r in upstream.requests if r.path.endswith("/chat/completions")]
    body = sent.body
    names = [t["function"]["name"] for t in body["tools"]]
    assert "exec_command" in names and all(t["type"] == "function" for t in body["tools"])
    roles = [m["role"] for m in body["messages"]]
    assert roles[0] == "system" and roles[-1] == "user" and "developer" not in roles
    assert body["stream"] is True and not {"reasoning", "include", "client_metadata", "store"} & set(body)
