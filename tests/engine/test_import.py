"""A proxy-only install has no torch: the engine package must import without it."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_package_does_not_import_torch():
    code = "import sys, backends.engine; assert 'torch' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
