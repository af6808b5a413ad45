"""Model names -> routes.

``vendor/model_name`` names a model group, ``vendor/model_name/deployment`` pins one of its
deployments, aliases name groups too, ``vendor/*`` routes every model of a vendor to one group
(passing the model name through to the upstream), a pattern alias of a ``vendor/*`` route of
Fireworks upstreams (``accounts/fireworks/models/*``) takes Fireworks' own names to it as
``vendor/<name>`` (for limits, usage and allow-lists), a pattern alias of a named route
(``claude-*``, fnmatch) routes every name it matches to that route (exact names first, then the
first matching pattern in config order), and ``default`` is the only model when exactly one is
configured (mistral.rs).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Protocol

from switchyard.core.backend import Backend
from switchyard.core.config import Config
from switchyard.core.deployments import BUILT_IN_BACKENDS, DeploymentConfig, ModelConfig, is_pattern
from switchyard.core.errors import InvalidRequest, NotFound, install_hint
from switchyard.core.settings import ConfigError, RouterConfig
from switchyard.providers.rows import wire_for
from switchyard.providers.wire import Caps
from switchyard.routing.health import Health


def caps_of(dep: DeploymentConfig) -> Caps:
    """What a deployment's upstream can carry (its provider row's), so the router knows what to
    fan out; the engine carries everything."""
    return Caps() if dep.backend != "upstream" else wire_for(dep).caps


def native_of(dep: DeploymentConfig) -> str | None:
    """The caller dialect whose bodies the deployment's API takes as sent (its native lane)."""
    return None if dep.backend == "engine" else wire_for(dep).native_dialect


def carries_of(model: ModelConfig, dep: DeploymentConfig) -> frozenset[str]:
    """What the caller's API makes optional that the deployment's row sends for its model
    (``thinking.budget_tokens`` to a thinking model); the engine is never translated to."""
    if dep.backend != "upstream":
        return frozenset()
    carries = wire_for(dep).carries
    return carries(dep.upstream_model(model.name)) if carries is not None else frozenset()


@dataclass(slots=True, eq=False)
class Target:
    """One deployment of a model group, with the backend that serves it and its health."""

    model: ModelConfig
    deployment: DeploymentConfig
    backend: Backend
    health: Health
    caps: Caps = field(default_factory=Caps)
    native: str | None = None  # the caller dialect it takes as sent (providers.wire.Wire.native_dialect)
    carries: frozenset[str] = frozenset()  # optional fields a translation sends (Wire.carries)
    name: str = ""

    def __post_init__(self) -> None:
        self.name = f"{self.model.name}/{self.deployment.name}"


@dataclass(slots=True)
class Route:
    """Where a model name leads: the group (for limits and usage) and its candidate targets."""

    group: str  # the group's configured name; a wildcard route resolves to the caller's name
    model: ModelConfig
    targets: list[Target]
    upstream_model: str | None = None  # wildcard routes: the name the upstream is asked for
    pinned: bool = False  # the caller named one deployment: no other deployment, no fallback
    pattern: str | None = None  # the pattern alias the caller's name matched (claude-*)
    # A deployment serves while the policy store is down (on_store_error: open). Read at each
    # admission: found once here (a route's targets never change).
    fail_open: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.fail_open = any(t.deployment.on_store_error == "open" for t in self.targets)


class AttemptSpans(Protocol):
    """Trace spans for a request's upstream attempts (``switchyard.http.tracing``)."""

    def start(self, deployment: str) -> None:
        """A span for an attempt on ``deployment`` that begins now; upstream calls made until the
        next ``start`` carry its trace context."""
        ...

    def end(self, error: BaseException | None = None) -> None:
        """End the current attempt's span (marked failed with ``error``)."""


@dataclass(slots=True)
class RunInfo:
    """Filled in while a request runs: which deployment served it, after how many attempts."""

    deployment: str | None = None
    attempts: int = 0
    tried: list[str] = field(default_factory=list)
    fallback: str | None = None  # the group that served, when it is not the one asked for
    prompt_tokens: int | None = None  # given by the pipeline (context-window check)
    # time.monotonic() of the first attempt's start and of the answer's end (metrics, logs)
    upstream_start: float | None = None
    upstream_end: float | None = None
    spans: AttemptSpans | None = None  # the trace's spans for attempts, when tracing is on
    upstream_id: str = ""  # the gateway's request id, which upstream calls carry (never the caller's)

    def attempt_id(self) -> str:
        """The x-request-id of the current attempt: unique per attempt (retries get ``-2``, ...)."""
        return self.upstream_id if self.attempts <= 1 else f"{self.upstream_id}-{self.attempts}"

    def headers(self) -> dict[str, str]:
        if self.deployment is None:
            return {}
        out = {"x-switchyard-deployment": self.deployment, "x-switchyard-attempts": str(self.attempts)}
        if self.fallback is not None:
            out["x-switchyard-fallback"] = self.fallback
        return out


def build_backend(model: ModelConfig, dep: DeploymentConfig) -> Backend:
    if dep.backend in BUILT_IN_BACKENDS:
        # Its process imports torch; a proxy-only install finds out here, not at first use.
        if importlib.util.find_spec("torch") is None:
            raise ConfigError(f"models.{model.name}: deployment {dep.name} uses the built-in {dep.backend}, "
                              f"which needs the 'engine' extra ({install_hint('engine')})")
        from switchyard.engine.host import built_in

        # Under ``--workers N`` the supervisor runs the model once and each worker attaches.
        return built_in(f"{model.name}/{dep.name}", dep)
    from switchyard.providers import UpstreamBackend

    return UpstreamBackend(dep, model.name)


class Resolver:
    def __init__(self, config: Config, rc: RouterConfig, backends: dict[str, Backend] | None = None) -> None:
        """``backends`` maps ``group/deployment`` to a ready-made backend (tests); the rest are
        built from the config."""
        self.config = config
        self.groups: dict[str, ModelConfig] = {}
        self.wildcards: dict[str, ModelConfig] = {}
        self.patterns: list[tuple[str, ModelConfig]] = []  # (alias prefix, its vendor/* route)
        self.globs: list[tuple[str, ModelConfig]] = []  # (pattern alias, its route), config order
        self._glob_routes: dict[str, Route] = {}  # one route per pattern, never one per name
        self.targets: dict[str, list[Target]] = {}
        self._routes: dict[str, Route] = {}
        given = backends or {}
        for m in config.models:
            self.targets[m.name] = [
                Target(m, d, given.get(f"{m.name}/{d.name}") or build_backend(m, d),
                       Health(rc.cooldown_failures, rc.cooldown_seconds), caps_of(d), native_of(d),
                       carries=carries_of(m, d))
                for d in m.deployments]
            vendor, name = m.name.split("/", 1)
            if name == "*":
                self.wildcards[vendor] = m
                self.patterns += [(prefix, m) for prefix in m.alias_patterns()]
            else:
                for alias in (m.name, *m.aliases):
                    if is_pattern(alias):
                        self.globs.append((alias, m))
                    else:
                        self.groups[alias] = m
        # Fallback names are checked with the config (Config._references), before any of this.

    def resolve(self, name: str) -> Route:
        route = self._routes.get(name)
        if route is not None:  # routes of configured names are built once: the hot path allocates nothing
            return route
        route = self._resolve(name)
        if route.upstream_model is None and route.pattern is None:  # a caller's names: not kept
            self._routes[name] = route
        return route

    def _resolve(self, name: str) -> Route:
        m = self.groups.get(name)
        if m is not None:
            return Route(m.name, m, self.targets[m.name])
        # vendor/model_name/deployment pins one deployment of a group
        group, _, dep = name.rpartition("/")
        m = self.groups.get(group)
        if m is not None and "/" in group:
            pinned = [t for t in self.targets[m.name] if t.deployment.name == dep]
            if pinned:
                return Route(m.name, m, pinned, pinned=True)
            raise NotFound(f"model {group} has no deployment {dep!r}", param="model")
        if name == "default":  # mistral.rs's name for the one model it serves
            return self.default()
        for prefix, pm in self.patterns:
            if name.startswith(prefix) and len(name) > len(prefix):
                _plain(name, name[len(prefix):])
                # Named as the configured form; the upstream (Fireworks) is asked for its own.
                vendor = pm.name.split("/", 1)[0]
                return Route(f"{vendor}/{name[len(prefix):]}", pm, self.targets[pm.name], upstream_model=name)
        for pattern, gm in self.globs:
            if fnmatchcase(name, pattern):
                route = self._glob_routes.get(pattern)
                if route is None:
                    route = self._glob_routes[pattern] = Route(gm.name, gm, self.targets[gm.name],
                                                               pattern=pattern)
                return route
        vendor, _, rest = name.partition("/")
        w = self.wildcards.get(vendor)
        if w is not None and rest:
            _plain(name, rest)
            return Route(name, w, self.targets[w.name], upstream_model=rest)
        raise NotFound(f"The model `{name}` does not exist", param="model")


    def default(self, kind: str = "completion") -> Route:
        """The model of a request that names none (llama.cpp's ``/completion``, mistral.rs's
        ``default``): the only configured model of its kind, as llama-server or mistral.rs, one
        model each, would answer. An embedding model is no candidate for a completion, nor a
        text model for an embedding: config.example.yaml serves SmolLM2 and the embedder, and
        ``/completion`` means SmolLM2."""
        mode = "embedding" if kind == "embedding" else "chat"
        fixed = [m for m in self.config.models if not m.name.endswith("/*")]
        models = [m for m in fixed if m.listed_mode == mode] or (fixed if len(fixed) == 1 else [])
        if len(models) != 1:
            names = ", ".join(m.name for m in models[:4]) + (", ..." if len(models) > 4 else "")
            why = f"{len(models)} {mode} models are configured ({names})" if models else \
                f"no {mode} model is configured by a fixed name"
            raise NotFound(f"The model `default` does not exist: name one in `model` ({why})", param="model")
        return Route(models[0].name, models[0], self.targets[models[0].name])


def _plain(name: str, rest: str) -> None:
    """A wildcard route passes ``rest`` to the upstream as its model name: no empty, ``.`` or
    ``..`` segment (an upstream may read them as a path), so that the name the allow-lists saw
    is the model the upstream is asked for."""
    if any(seg in ("", ".", "..") for seg in rest.split("/")) or "\\" in rest:
        raise InvalidRequest(f"model {name!r}: a model name has no empty, '.' or '..' segment and "
                             "no backslash", param="model")
