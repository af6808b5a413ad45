"""Where ``make claude-code`` and ``make codex`` install the agent CLIs: one npm cache per user,
shared by every checkout (``${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/npm/<name>-<version>``),
the versions read from the Makefile's pins so that the two never disagree."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pinned(var: str) -> str:
    """The value of ``VAR := value`` in the Makefile."""
    found = re.search(rf"^{var} := (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert found is not None, f"the Makefile pins no {var}"
    return found[1]


def npm_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "switchyard" / "npm"


def installed(name: str, version_var: str, binary: str) -> Path:
    """The CLI's path as the Makefile installs it (it may not be there yet)."""
    return npm_cache() / f"{name}-{pinned(version_var)}" / "node_modules" / ".bin" / binary


CLAUDE_CODE_VERSION = pinned("CLAUDE_CODE_VERSION")
CODEX_VERSION = pinned("CODEX_VERSION")
CLAUDE_CODE = installed("claude-code", "CLAUDE_CODE_VERSION", "claude")
CODEX = installed("codex", "CODEX_VERSION", "codex")
OIDC_PROVIDER = (npm_cache() / f"oidc-provider-{pinned('OIDC_PROVIDER_VERSION')}" / "node_modules"
                 / "oidc-provider")
