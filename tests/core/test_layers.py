"""The layer contract (pyproject's import-linter ``layers``) holds for the tree, and an import
from a lower layer into a higher one breaks it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    assert LINT.exists(), f"{LINT} is missing: install the dev extra (make test does)"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_tree_keeps_its_layers() -> None:
    r = lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "switchyard", tmp_path / "switchyard",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    stops = tmp_path / "switchyard" / "core" / "stops.py"
    stops.write_text(stops.read_text() + "\nfrom switchyard.routing import Router  # noqa: E402\n")
    r = lint(tmp_path)
    assert r.returncode != 0
    assert "switchyard.core is not allowed to import switchyard.routing" in r.stdout, r.stdout


def test_the_old_registry_circle_breaks_the_providers_contract(tmp_path: Path) -> None:
    """wire.py (the types every codec imports) looking rows up again is an upward import."""
    shutil.copytree(ROOT / "switchyard", tmp_path / "switchyard",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    wire = tmp_path / "switchyard" / "providers" / "wire.py"
    wire.write_text(wire.read_text() + "\nfrom switchyard.providers import rows  # noqa: E402,F401\n")
    r = lint(tmp_path)
    assert r.returncode != 0
    assert ("switchyard.providers.wire is not allowed to import switchyard.providers.rows"
            in r.stdout), r.stdout
