"""The wheel: one top-level package, ``switchyard``, under our own distribution name (``switchyard``
on PyPI is an unrelated project), with its data files (Lua scripts, migrations, console assets)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_installs_one_package(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        str(ROOT), "-w", str(tmp_path)], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    wheel = next(tmp_path.glob("*.whl"))
    assert wheel.name.startswith("switchyard_gateway-")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"switchyard", wheel.name.split("-py3")[0] + ".dist-info"}
    for data in ("switchyard/policies/scripts/admit.lua", "switchyard/http/console/static/app.html",
                 "switchyard/policies/ledger/migrations/001_usage.sql"):
        assert data in names
    info = wheel.name.split("-py3")[0] + ".dist-info"
    entry = zipfile.ZipFile(wheel).read(info + "/entry_points.txt").decode()
    assert "switchyard = switchyard.http.cli:main" in entry
