"""The agent CLIs are installed once per user, not per checkout: ``make claude-code`` and ``make
codex`` put them where ``tests/clients/cli.py`` looks (the shared npm cache, a folder per pinned
version), and a checkout holds none of them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.clients import cli


@pytest.mark.parametrize("xdg", [True, False])
def test_make_installs_the_clis_where_the_tests_look(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      xdg: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME" and not k.startswith("MAKE")}
    env["HOME"] = str(tmp_path / "home")
    if xdg:
        env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
        monkeypatch.setenv("XDG_CACHE_HOME", env["XDG_CACHE_HOME"])
    else:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", env["HOME"])
    plan = subprocess.run(["make", "-n", "claude-code", "codex"], cwd=cli.ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    cache = Path(env["XDG_CACHE_HOME"] if xdg else tmp_path / "home" / ".cache") / "switchyard" / "npm"
    assert cli.npm_cache() == cache
    for name, version, package in [("claude-code", cli.CLAUDE_CODE_VERSION, "@anthropic-ai/claude-code"),
                                   ("codex", cli.CODEX_VERSION, "@openai/codex")]:
        target = cache / f"{name}-{version}"
        assert f"npm install --prefix $tmp --no-audit --no-fund --loglevel=error {package}@{version}" \
            in plan.stdout
        assert f"mv -T $tmp {target} " in plan.stdout  # renamed into place whole
    assert cli.installed("claude-code", "CLAUDE_CODE_VERSION", "claude") == \
        cache / f"claude-code-{cli.CLAUDE_CODE_VERSION}" / "node_modules" / ".bin" / "claude"
    assert ".cache/claude-code" not in plan.stdout and "--prefix .cache" not in plan.stdout


def test_one_claude_code_version_is_pinned() -> None:
    assert cli.CLAUDE_CODE_VERSION == "2.1.332"  # docs/dialects.md and docs/clients.md name it
    for doc in ("docs/dialects.md", "docs/clients.md", "README.md"):
        assert "2.1.332" in (cli.ROOT / doc).read_text(), doc
