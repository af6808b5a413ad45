"""Model names -> deployments, and running a request on one.

``vendor/model_name`` names a model group, ``vendor/model_name/deployment`` pins one of its
deployments, aliases name groups too, and ``vendor/*`` routes every model of a vendor to one
group, passing the model name through to the upstream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from backends.base import Backend
from gateway.canonical import CanonicalRequest, Chunk
from gateway.config import Config, DeploymentConfig, ModelConfig
from gateway.errors import NotFound, Unavailable


@dataclass(slots=True)
class Target:
    """One deployment of a model group, with the backend that serves it."""

    model: ModelConfig
    deployment: DeploymentConfig
    backend: Backend

    @property
    def name(self) -> str:
        return f"{self.model.name}/{self.deployment.name}"


@dataclass(slots=True)
class Route:
    """Where a model name leads: the group (for limits and usage) and its candidate targets."""

    group: str  # the group's configured name; a wildcard route resolves to the caller's name
    model: ModelConfig
    targets: list[Target]
    upstream_model: str | None = None  # wildcard routes: the name the upstream is asked for

    @property
    def fail_open(self) -> bool:
        return any(t.deployment.on_store_error == "open" for t in self.targets)


@dataclass(slots=True)
class RunInfo:
    """Filled in while a request runs: which deployment served it, after how many attempts."""

    deployment: str | None = None
    attempts: int = 0
    tried: list[str] = field(default_factory=list)


def build_backend(model: ModelConfig, dep: DeploymentConfig) -> Backend:
    if dep.backend == "engine":
        try:
            from backends.engine import EngineBackend
        except ImportError as e:  # pragma: no cover - depends on the install
            raise RuntimeError(f"model {model.name}: the engine needs the 'engine' extra ({e})") from e
        return EngineBackend(dep)
    from backends.upstream import UpstreamBackend

    return UpstreamBackend(dep, model.name)


class Router:
    def __init__(self, config: Config, backends: dict[str, Backend] | None = None) -> None:
        """``backends`` maps ``group/deployment`` to a ready-made backend (tests); the rest are
        built from the config."""
        self.config = config
        self._groups: dict[str, ModelConfig] = {}
        self._wildcards: dict[str, ModelConfig] = {}
        self._targets: dict[str, list[Target]] = {}
        given = backends or {}
        for m in config.models:
            targets = [Target(m, d, given.get(f"{m.name}/{d.name}") or build_backend(m, d))
                       for d in m.deployments]
            self._targets[m.name] = targets
            vendor, name = m.name.split("/", 1)
            if name == "*":
                self._wildcards[vendor] = m
            else:
                for alias in (m.name, *m.aliases):
                    self._groups[alias] = m

    @property
    def targets(self) -> list[Target]:
        return [t for ts in self._targets.values() for t in ts]

    def model_names(self) -> list[str]:
        return [m.name for m in self.config.models]

    def resolve(self, name: str) -> Route:
        m = self._groups.get(name)
        if m is not None:
            return Route(m.name, m, self._targets[m.name])
        # vendor/model_name/deployment pins one deployment of a group
        group, _, dep = name.rpartition("/")
        m = self._groups.get(group)
        if m is not None and "/" in group:
            pinned = [t for t in self._targets[m.name] if t.deployment.name == dep]
            if pinned:
                return Route(m.name, m, pinned)
            raise NotFound(f"model {group} has no deployment {dep!r}", param="model")
        if name == "default" and len(self.config.models) == 1:  # mistral.rs: the only model
            only = self.config.models[0]
            return Route(only.name, only, self._targets[only.name])
        vendor, _, rest = name.partition("/")
        w = self._wildcards.get(vendor)
        if w is not None and rest:
            return Route(name, w, self._targets[w.name], upstream_model=rest)
        raise NotFound(f"The model `{name}` does not exist", param="model")

    async def stream(self, req: CanonicalRequest, route: Route, info: RunInfo) -> AsyncIterator[Chunk]:
        """Run ``req`` on the first ready target of ``route``."""
        target = next((t for t in route.targets if t.backend.ready), None)
        if target is None:
            raise Unavailable(f"model {route.group} is loading", headers={"retry-after": "5"})
        info.deployment = target.name
        info.attempts += 1
        info.tried.append(target.name)
        gen = (target.backend.generate(req, route.upstream_model) if route.upstream_model
               else target.backend.generate(req))
        async for ch in gen:
            yield ch

    async def start(self) -> None:
        for t in self.targets:
            await t.backend.start()

    async def aclose(self) -> None:
        for t in self.targets:
            await t.backend.aclose()

    @property
    def ready(self) -> bool:
        return all(t.backend.ready for t in self.targets)
