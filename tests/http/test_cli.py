"""``switchyard check-config``: a good file passes; a bad one exits 2 naming the file, the field
path and the reason. Secrets as ``env:NAME``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from switchyard.core.config import load_config
from switchyard.http.cli import main

GOOD = """
master_key: env:SY_TEST_MASTER
models:
  - name: vendor/m
    deployments:
      - name: d1
        dialect: llamacpp
        base_url: http://127.0.0.1:9/v1
        api_key: env:SY_TEST_UPSTREAM
teams:
  - name: t
keys:
  - id: k1
    team: t
    key: env:SY_TEST_KEY
"""


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SY_TEST_MASTER", "sk-master-from-env")
    monkeypatch.setenv("SY_TEST_UPSTREAM", "sk-upstream-from-env")
    monkeypatch.setenv("SY_TEST_KEY", "sk-key-from-env")


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "switchyard.yaml"
    p.write_text(text)
    return p


def test_good_config(tmp_path: Path, env: None, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, GOOD)
    assert main(["check-config", str(p)]) == 0
    out = capsys.readouterr().out
    assert str(p) in out and "ok" in out
    assert "from-env" not in out  # secrets are never printed


def test_env_secrets_are_resolved(tmp_path: Path, env: None) -> None:
    cfg = load_config(write(tmp_path, GOOD))
    assert cfg.master_key == "sk-master-from-env"
    assert cfg.models[0].deployments[0].api_key == "sk-upstream-from-env"
    assert cfg.keys[0].key == "sk-key-from-env"


BAD = [
    # (replace this, with that, field path, reason fragment)
    ("dialect: llamacpp", "dialect: klingon", "models.0.deployments.0.dialect", "llamacpp"),
    ("        base_url: http://127.0.0.1:9/v1\n", "", "models.0.deployments.0", "base_url"),
    ("name: vendor/m", "name: justaname", "models.0.name", "vendor/model_name"),
    ("    team: t", "    team: nope", "keys", "unknown team"),
    ("  - name: t\n", "  - name: t\n    colour: red\n", "teams.0.colour", "Extra inputs"),
    ("        dialect: llamacpp", "        dialect: llamacpp\n        timeout: -1",
     "models.0.deployments.0.timeout", "greater than 0"),
]


@pytest.mark.parametrize(("old", "new", "path", "reason"), BAD, ids=[b[2] for b in BAD])
def test_bad_config_exits_2_naming_file_field_and_reason(tmp_path: Path, env: None,
                                                         capsys: pytest.CaptureFixture[str],
                                                         old: str, new: str, path: str, reason: str) -> None:
    assert old in GOOD
    p = write(tmp_path, GOOD.replace(old, new))
    assert main(["check-config", str(p)]) == 2
    err = capsys.readouterr().err
    assert str(p) in err and path in err and reason in err, err


def test_unset_env_secret(tmp_path: Path, env: None, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SY_TEST_KEY")
    p = write(tmp_path, GOOD)
    assert main(["check-config", str(p)]) == 2
    err = capsys.readouterr().err
    assert "keys.0.key" in err and "SY_TEST_KEY" in err and "not set" in err
    assert "from-env" not in err


def test_not_yaml_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, "models: [unclosed")
    assert main(["check-config", str(p)]) == 2
    assert str(p) in capsys.readouterr().err
    missing = tmp_path / "nope.yaml"
    assert main(["check-config", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err


def test_as_a_process(tmp_path: Path) -> None:
    p = write(tmp_path, GOOD.replace("dialect: llamacpp", "dialect: klingon"))
    r = subprocess.run([sys.executable, "-m", "switchyard", "check-config", str(p)], capture_output=True,
                       text=True, timeout=60, env={"SY_TEST_MASTER": "a", "SY_TEST_UPSTREAM": "b",
                                                   "SY_TEST_KEY": "c", "PATH": "/usr/bin:/bin"},
                       cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 2
    assert str(p) in r.stderr and "models.0.deployments.0.dialect" in r.stderr


def test_unknown_fallback_fails_the_check(tmp_path: Path, env: None,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    bad = GOOD.replace("  - name: vendor/m\n", "  - name: vendor/m\n    fallbacks: [vendor/gone]\n")
    path = write(tmp_path, bad)
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "models.0" in err and "vendor/gone" in err


def test_an_owned_field_on_an_allow_list_fails_the_check(tmp_path: Path, env: None,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The dialect tables know which fields the gateway owns; check-config asks them too."""
    allow = "        allow_extra_params: [priority, max_new_tokens]\n"
    key = "        api_key: env:SY_TEST_UPSTREAM\n"
    text = GOOD.replace(key, key + allow)
    assert main(["check-config", str(write(tmp_path, text))]) == 2
    err = capsys.readouterr().err
    assert "models.vendor/m.deployments.d1.allow_extra_params" in err and "'max_new_tokens'" in err
    assert main(["check-config", str(write(tmp_path, text.replace(", max_new_tokens", "")))]) == 0
