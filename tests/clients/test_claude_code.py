"""Claude Code's CLI itself (npm ``@anthropic-ai/claude-code`` at the Makefile's pin, installed by
``make claude-code`` into the user's shared npm cache: ``tests/clients/cli.py``), unmodified and
headless (``claude -p``), pointed at a gateway on
loopback with ``ANTHROPIC_BASE_URL`` and a Switchyard key, its model name resolved by an alias to
an OpenAI-dialect loopback upstream. Offline: every proxy variable points at a closed port, so
anything it tried beyond loopback would fail (and the answer with it)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.clients.cli import CLAUDE_CODE, CLAUDE_CODE_VERSION
from tests.fakes.upstream import Behaviour, FakeUpstream, refused_url
from tests.gateway.conftest import KEY, base_config, serve, upstream_model

CLAUDE = Path(os.environ.get("SWITCHYARD_CLAUDE_CODE") or CLAUDE_CODE)
ANSWER = "hello from the gateway"


def claude() -> str:
    if not CLAUDE.exists():
        pytest.fail(f"Claude Code's CLI is not installed at {CLAUDE}: run `make claude-code` (npm install "
                    f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION} into {CLAUDE_CODE.parents[2]}) or set "
                    "SWITCHYARD_CLAUDE_CODE",
                    pytrace=False)
    return str(CLAUDE)


@pytest.mark.parametrize("auth", ["ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY"])
async def test_claude_code_headless(tmp_path: Path, auth: str) -> None:
    binary = claude()
    async with FakeUpstream(default=Behaviour(text=ANSWER)) as up:
        model = upstream_model("local/coder", up.url, model="coder")
        model.update(aliases=["claude-sonnet-5", "claude-haiku-4-5"], context_window=131072,
                     max_output_tokens=4096)
        async with serve(base_config([model], router={"retries": 0})) as gw:
            dead = refused_url().removesuffix("/v1")
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
                   "ANTHROPIC_BASE_URL": str(gw.base_url), auth: KEY,
                   "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
                   "HTTPS_PROXY": dead, "HTTP_PROXY": dead, "NO_PROXY": "127.0.0.1,localhost"}
            proc = await asyncio.create_subprocess_exec(
                binary, "-p", "say hi", "--model", "claude-sonnet-5", env=env, cwd=tmp_path,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            try:
                out, err = await asyncio.wait_for(proc.communicate(), 120)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
    assert proc.returncode == 0, (out.decode()[-2000:], err.decode()[-2000:])
    assert ANSWER in out.decode()
    chats = [r for r in up.requests if r.path.endswith("/chat/completions")]
    assert chats, [r.path for r in up.requests]
    body = chats[0].body
    assert body["model"] == "coder" and body["stream"] is True
    assert chats[0].bound == 4096  # Claude Code asks 32000 or more: lowered to max_output_tokens
    assert {"Bash", "Edit", "Read"} <= {t["function"]["name"] for t in body["tools"]}
    system = body["messages"][0]
    assert system["role"] == "system" and "x-anthropic-billing-header" not in system["content"]
    for field in ("thinking", "context_management", "output_config", "system", "metadata"):
        assert field not in body
