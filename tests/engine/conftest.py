from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.engine import tiny


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny.build(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tiny_loaded(tiny_dir: Path) -> Any:
    from backends.engine.loader import load
    from gateway.config import EngineConfig

    return load(EngineConfig(path=str(tiny_dir), threads=1))
