"""The gateway's configuration: one YAML file, validated once at start.

A bad file fails with the file, the field path and the reason (``ConfigError``; the CLI exits 2).
Secrets may be written as ``env:NAME`` and are read from the environment at load time. The
sections live in settings.py (service-wide) and deployments.py (models and their deployments).
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from switchyard.core.deployments import ModelConfig
from switchyard.core.errors import install_hint
from switchyard.core.settings import (
    AUTO_KEY,
    MIN_MASTER_KEY,
    CacheConfig,
    ConfigError,
    ConfigModel,
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
)


class TeamConfig(ConfigModel):
    name: str
    models: list[str] | None = Field(None, description="allowlist; missing = every model")
    limits: Limits = Field(default_factory=Limits)
    model_limits: dict[str, Limits] = Field(default_factory=dict, description="per (team, model)")
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
    master_key: Secret = Field(None, description="guards /admin; usually env:NAME; auto: generated "
                               "on first start (master_key_file())")
    models: list[ModelConfig] = Field(default_factory=list)
    teams: list[TeamConfig] = Field(default_factory=list)
    keys: list[KeyConfig] = Field(default_factory=list)

    @field_validator("master_key")
    @classmethod
    def _auto_key(cls, v: str | None) -> str | None:
        key = generated_master_key() if v == AUTO_KEY else v  # env:NAME was read by Secret
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
        for i, m in enumerate(self.models):
            for ref in (*m.fallbacks, *([m.context_fallback] if m.context_fallback else [])):
                if ref not in names:
                    raise ValueError(f"models.{i}: fallback {ref!r} is not a configured model or alias")
        for where, listed in [*((f"teams.{i}.models", t.models) for i, t in enumerate(self.teams)),
                              *((f"teams.{i}.model_limits", list(t.model_limits))
                                for i, t in enumerate(self.teams)),
                              *((f"keys.{i}.models", k.models) for i, k in enumerate(self.keys))]:
            for name in listed or ():
                why = self._not_a_model(name)
                if why:
                    raise ValueError(f"{where}: {name!r} {why}")
        rules = [*(m.cache for m in self.models), *(t.cache for t in self.teams),
                 *(k.cache for k in self.keys)]
        if any(r is not None and r.mode == "semantic" for r in rules) and self.semantic_embedder() is None:
            raise ValueError("cache mode: semantic needs a model served by the built-in embedder "
                             "(a deployment with backend: embedder) to compare prompts with")
        for i, m in enumerate(self.models):
            for j, d in enumerate(m.deployments):
                if d.backend == "engine" and importlib.util.find_spec("torch") is None:
                    raise ValueError(f"models.{i}.deployments.{j}: the built-in engine needs the engine "
                                     f"extra: {install_hint('engine')}")
        return self

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
    return parse_config(raw or {}, source=str(path))


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
