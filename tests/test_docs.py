"""The docs name paths that exist: every backticked path in README.md and docs/*.md (and every
path in README's "How a request flows" diagram) is a file or folder of this checkout."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("switchyard", "tests", "bench", "docs", "deploy", ".ci")
# `switchyard/http/app.py`, `tests/fakes/`, `switchyard/dialects/<dialect>.py` (a placeholder)
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(map(re.escape, TOPS)) + r")/[\w./<>*-]*)")


def named_paths(text: str) -> set[str]:
    spans = re.findall(r"`([^`\n]+)`", text)
    spans += re.findall(r"```\n(.*?)```", text, flags=re.S)  # diagrams
    return {m.rstrip(".,:;)") for s in spans for m in PATH.findall(s)}


def exists(path: str) -> bool:
    if "<" in path or "*" in path:  # a placeholder: some file must fit it
        return any(ROOT.glob(re.sub(r"<[^>]*>", "*", path)))
    return (ROOT / path).exists()


def test_every_path_the_docs_name_exists() -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = [f"{d.relative_to(ROOT)}: {p}" for d in docs for p in sorted(named_paths(d.read_text()))
               if not exists(p)]
    assert not missing, "\n".join(missing)


def test_the_check_finds_paths() -> None:
    """The pattern itself: a path in backticks and one in a diagram are read; prose is not."""
    text = ("see `switchyard/http/app.py` and `tests/nope.py`\n"
            "```\nroute  switchyard/gateway/\n```\nswitchyard/x.py")
    assert named_paths(text) == {"switchyard/http/app.py", "tests/nope.py", "switchyard/gateway/"}
    assert not exists("tests/nope.py") and exists("switchyard/dialects/<dialect>.py")
