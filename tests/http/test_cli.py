"""``switchyard check-config``: a good file passes; a bad one exits 2 naming the file, the field
path and the reason. Secrets as ``env:NAME``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from switchyard.core.config import load_config
from switchyard.http.cli import main
from tests.gateway.conftest import base_config, serve, upstream_model

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
                       text=True, timeout=60, env={"SY_TEST_MASTER": "a" * 16, "SY_TEST_UPSTREAM": "b",
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


# --- what used to pass the check and fail at run time (issue 24) ------------------------------

CAUGHT = [
    # (replace this, with that, field path, reason fragment)
    ("http://127.0.0.1:9/v1", "htp:/127.0.0.1:9100 /v1", "models.0.deployments.0.base_url", "whitespace"),
    ("http://127.0.0.1:9/v1", "htp:/127.0.0.1:9100/v1", "models.0.deployments.0.base_url",
     "must start with http:// or https://"),
    ("http://127.0.0.1:9/v1", "127.0.0.1:9100/v1", "models.0.deployments.0.base_url",
     "must start with http:// or https://"),
    ("http://127.0.0.1:9/v1", "http:///v1", "models.0.deployments.0.base_url", "names no host"),
    ("http://127.0.0.1:9/v1", "http://127.0.0.1:x/v1", "models.0.deployments.0.base_url", "not a URL"),
    ("  - name: t\n", "  - name: t\n    models: [vendor/gone]\n", "teams.0.models",
     "'vendor/gone' is not a configured model"),
    ("    team: t\n", "    team: t\n    models: [other/*]\n", "keys.0.models", "not a configured model"),
    ("  - name: vendor/m\n", "  - name: vendor/m\n    aliases: [m]\n", "keys.0.models", "is an alias"),
    ("  - name: t\n", "  - name: t\n    model_limits: {vendor/typo: {rpm: 1}}\n", "teams.0.model_limits",
     "not a configured model"),
    ("        dialect: llamacpp\n", "        dialect: llamacpp\n        weight: 2\n        dialect: openai\n",
     "models.0.deployments.0.dialect", "key repeats (lines 7 and 9)"),
]


@pytest.mark.parametrize(("old", "new", "path", "reason"), CAUGHT, ids=[c[3][:30] for c in CAUGHT])
def test_check_config_catches_what_fails_at_run_time(tmp_path: Path, env: None,
                                                     capsys: pytest.CaptureFixture[str],
                                                     old: str, new: str, path: str, reason: str) -> None:
    assert old in GOOD
    text = GOOD.replace(old, new)
    if "is an alias" in reason:
        text = text.replace("    key: env:SY_TEST_KEY\n", "    key: env:SY_TEST_KEY\n    models: [m]\n")
    p = write(tmp_path, text)
    assert main(["check-config", str(p)]) == 2
    err = capsys.readouterr().err
    assert str(p) in err and path in err and reason in err, err
    assert main(["serve", "--config", str(p)]) == 2  # serve refuses it too, before binding anything


def test_allow_lists_may_name_models_vendors_and_names_under_a_wildcard(tmp_path: Path, env: None) -> None:
    text = GOOD.replace("  - name: vendor/m\n", "  - name: vendor/m\n    aliases: [m]\n") + """\
    models: [vendor/m, vendor/*, wild/anything]
"""
    text = text.replace("teams:\n", """\
  - name: wild/*
    deployments: [{name: w, base_url: "http://127.0.0.1:9/v1"}]
teams:
""")
    assert main(["check-config", str(write(tmp_path, text))]) == 0


async def test_a_query_string_in_base_url_stays_after_the_path(upstream) -> None:
    """Azure style: a base_url ending in ?api-version=... gets /chat/completions before the query
    (it was appended after it), and the query reaches the upstream."""
    url = f"{upstream.url}/deployments/gpt-4o/?api-version=2024-10-21"
    config = base_config([upstream_model("azure/gpt-4o", url)])
    async with serve(config) as client:
        r = await client.post("/v1/chat/completions", json={
            "model": "azure/gpt-4o", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert upstream.requests[-1].path == "/v1/deployments/gpt-4o/chat/completions"
    assert upstream.requests[-1].query == {"api-version": "2024-10-21"}


def without(module: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """The CLI in a process where ``module`` cannot be imported (an extra that is not installed)."""
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "from switchyard.http.cli import main\nsys.exit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])


@pytest.mark.parametrize(("module", "section", "path", "extra"), [
    ("torch", "models:\n  - name: local/m\n    deployments: [{name: engine, backend: engine}]\n",
     "models.0.deployments.0", "engine"),
    ("asyncpg", "usage: {ledger: 'postgresql://127.0.0.1:9/x'}\n", "usage.ledger", "ledger"),
    ("opentelemetry.sdk", "tracing: {otlp_endpoint: 'http://127.0.0.1:9/v1/traces'}\n",
     "tracing.otlp_endpoint", "otel"),
])
def test_a_config_needing_a_missing_extra_fails_check_config_as_serve(
        tmp_path: Path, module: str, section: str, path: str, extra: str) -> None:
    p = write(tmp_path, section)
    for argv in (["check-config", str(p)], ["serve", "--config", str(p)]):
        done = without(module, argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert str(p) in done.stderr and path in done.stderr and f"switchyard-gateway[{extra}]" in done.stderr


def test_the_example_configs_commented_upstream_is_a_valid_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """The block users uncomment: once uncommented it must load (it repeated two keys)."""
    import yaml

    from switchyard.core.config import parse_config

    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    lines = (Path(__file__).resolve().parents[2] / "config.example.yaml").read_text().splitlines()
    start = lines.index("  # - name: openai/gpt-4o-mini")
    block = []
    for line in lines[start:]:
        if not line.startswith("  # ") or line.startswith("  # Fireworks"):
            break
        block.append(line[4:])
    text = "models:\n" + "\n".join("  " + b for b in block)
    from switchyard.core.config import _repeated_key

    assert _repeated_key(yaml.compose(text, Loader=yaml.SafeLoader), [], set()) is None
    assert parse_config(yaml.safe_load(text)).models[0].deployments[0].allow_extra_params == []


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


# --- configs that parse but cannot work (issue 28, items 4 and 5) ------------------------------

CUT_OFF = GOOD[:GOOD.index("models:")]  # a file cut short before models:, the master key still in it


@pytest.mark.parametrize("text", ["", "\n# nothing yet\n", CUT_OFF, CUT_OFF + "models: []\n"],
                         ids=["empty", "comment", "cut-off", "empty-lists"])
def test_a_config_with_no_models_teams_or_keys_is_refused(tmp_path: Path, env: None, text: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, text)
    assert main(["check-config", str(p)]) == 2
    err = capsys.readouterr().err
    assert str(p) in err and "no models, teams or keys" in err and "allow_empty: true" in err, err
    assert main(["reload", "--pid", "1", "--config", str(p)]) == 2  # checked before any signal
    assert "nothing signalled" in capsys.readouterr().err
    p.write_text(text + "allow_empty: true\n")  # a gateway meant to start empty says so
    assert main(["check-config", str(p)]) == 0


SECRETS = "sk-one-secret-value", "sk-another-secret"
UNUSABLE = [
    # (replace this, with that, what the message names)
    ("keys:\n", f"keys:\n  - {{id: k1, team: t, key: {SECRETS[0]}}}\n", "key id 'k1' is given twice"),
    ("keys:\n", f"keys:\n  - {{id: k0, team: t, key: {SECRETS[0]}}}\n"
                 f"  - {{id: k9, team: t, key: {SECRETS[0]}}}\n", "keys 'k0' and 'k9' have the same secret"),
    ("        dialect: llamacpp\n", "        provider: azure\n",
     "(vendor/m/d1): an azure deployment needs model"),
    ("        dialect: llamacpp\n        base_url: http://127.0.0.1:9/v1\n"
     "        api_key: env:SY_TEST_UPSTREAM\n", "        provider: openai\n",
     "(vendor/m/d1): an openai deployment to api.openai.com needs api_key"),
]


@pytest.mark.parametrize(("old", "new", "says"), UNUSABLE,
                         ids=["id-twice", "secret-twice", "azure", "openai"])
def test_check_config_refuses_keys_and_deployments_that_cannot_work(
        tmp_path: Path, env: None, capsys: pytest.CaptureFixture[str], old: str, new: str, says: str) -> None:
    assert old in GOOD
    p = write(tmp_path, GOOD.replace(old, new))
    assert main(["check-config", str(p)]) == 2
    err = capsys.readouterr().err
    assert says in err, err
    assert not any(s in err for s in (*SECRETS, "from-env")), err  # named by id, never by the secret


def test_those_deployments_pass_once_given_what_they_lack(tmp_path: Path, env: None) -> None:
    azure = GOOD.replace("        dialect: llamacpp\n",
                         "        provider: azure\n        model: gpt-4o-prod\n")
    openai = GOOD.replace("        dialect: llamacpp\n        base_url: http://127.0.0.1:9/v1\n",
                          "        provider: openai\n")
    wild = GOOD.replace("        dialect: llamacpp\n", "        provider: azure\n")
    wild = wild.replace("vendor/m", "azure/*")
    for text in (azure, openai, wild):
        assert main(["check-config", str(write(tmp_path, text))]) == 0, text
