"""Hot reload: ``SIGHUP`` (or ``switchyard reload``) re-reads the config file, validates it as
``check-config`` does, and swaps the whole app at once.

A request runs start to end on the app it arrived at: the swap changes which app the *next*
request reaches, so requests in flight finish on the old config. A file that does not load
changes nothing and the log says why. What a reload carries over instead of rebuilding: the
backends of deployments left exactly as they were (their connection pools, a loaded engine), the
policy store when ``store`` is unchanged (its counters, leases and sessions; Redis keeps them
anyway), and the metrics' counters. The old app is closed once its requests have finished (at
most ``server.shutdown_grace`` seconds later).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from switchyard.core.config import Config
from switchyard.core.deployments import BUILT_IN_BACKENDS
from switchyard.core.settings import ConfigError
from switchyard.http.app import create_app
from switchyard.http.asgi import Switchyard
from switchyard.http.checked import load_checked
from switchyard.http.verdict import write_verdict
from switchyard.policies.factory import build_policies
from switchyard.routing import Router

log = logging.getLogger("switchyard.reload")
Message = dict[str, Any]


class Lifespan:
    """Runs one ASGI app's lifespan protocol by hand: start it, and later stop it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._in: asyncio.Queue[Message] = asyncio.Queue()
        self._out: asyncio.Queue[Message] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def _step(self, kind: str) -> None:
        await self._in.put({"type": f"lifespan.{kind}"})
        msg = await self._out.get()
        if msg["type"] != f"lifespan.{kind}.complete":
            raise RuntimeError(msg.get("message") or f"the app's {kind} failed")

    async def start(self) -> None:
        async def send(msg: Message) -> None:
            await self._out.put(msg)

        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        self._task = asyncio.create_task(self.app(scope, self._in.get, send), name="lifespan")
        await self._step("startup")

    async def stop(self) -> None:
        if self._task is None:
            return
        try:
            await self._step("shutdown")
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 5)


class Reloadable:
    """The ASGI app ``switchyard serve`` serves: the current ``Switchyard`` app, which ``reload``
    replaces. Handles the server's lifespan itself (it starts and stops whichever app is current)."""

    def __init__(self, path: str | Path, config: Config,
                 build: Callable[..., Switchyard] = create_app, *, pid_file: str | None = None,
                 worker: bool = False) -> None:
        self.path = Path(path)
        # Where a SIGHUP's verdict goes for ``switchyard reload --pid-file`` (verdict.py); a
        # worker under --workers writes its own file beside the supervisor's.
        self.pid_file, self.worker = pid_file, worker
        self.refusal = ""  # why the last reload changed nothing
        self.config = config
        self.build = build
        self.current = build(config)
        self._life = Lifespan(self.current)
        self._lock = asyncio.Lock()
        self._retiring: set[asyncio.Future[Any]] = set()
        self.reloads = 0  # successful ones

    @property
    def state(self) -> Any:
        return self.current.state

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        await self.current(scope, receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                try:
                    await self._life.start()
                except Exception as e:
                    await send({"type": "lifespan.startup.failed", "message": str(e)})
                    return
                with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
                    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.on_hup)
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
                if self._retiring:
                    await asyncio.gather(*self._retiring, return_exceptions=True)
                await self._life.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def on_hup(self) -> None:
        task = asyncio.ensure_future(self._reload_and_answer())
        self._retiring.add(task)  # keeps a reference until it is done
        task.add_done_callback(self._retiring.discard)

    async def _reload_and_answer(self) -> None:
        ok = await self.reload()
        write_verdict(self.pid_file, ok, "" if ok else self.refusal, worker=self.worker)

    async def reload(self) -> bool:
        """Load, validate and swap in the config file; False (and a log line why) when the file
        cannot be used, the running app unchanged."""
        async with self._lock:
            try:
                config = load_checked(self.path)
                hosted_engines_unchanged(self.config, config)
            except ConfigError as e:
                log.error("reload refused, the running config is unchanged: %s", e)
                self.refusal = f"reload refused, the running config is unchanged: {e}"
                return False
            old, old_life = self.current, self._life
            gw = old.gateway
            backends = gw.router.hand_on(config)
            same_store = config.store == self.config.store
            try:
                kept = gw.policies
                policies = (build_policies(config, store=kept.store, answers=kept.answers) if same_store
                            else build_policies(config))
                new = self.build(config, router=Router(config, backends), policies=policies)
                exporter, before = new.state.exporter, old.state.exporter
                if exporter is not None and before is not None and \
                        config.metrics.per_key == self.config.metrics.per_key:
                    exporter.recorder.carry(before.recorder)  # counters never go down
                life = Lifespan(new)
                await life.start()
            except Exception as e:  # a resource the new config names cannot be set up
                gw.router.take_back(backends)
                log.error("reload failed, the running config is unchanged: %s: %s", type(e).__name__, e)
                self.refusal = f"reload failed, the running config is unchanged: {type(e).__name__}: {e}"
                return False
            if same_store:
                gw.policies.owns_store = False
            self.current, self._life, previous = new, life, self.config
            self.config = config
            self.reloads += 1
            try:  # the operator who sent SIGHUP is not known here: the signal is the actor
                await policies.audit.record(actor={"id": "sighup", "role": None}, action="config.reload",
                                            target=str(self.path)[-200:],
                                            after={"changed": changed_sections(previous, config)})
            except Exception as e:  # the reload stands; a store that is down only loses the entry
                log.error("reload: the audit entry was not written: %s", type(e).__name__)
            log.info("config reloaded", extra={"fields": {
                "path": str(self.path), "models": [m.name for m in config.models],
                "kept_deployments": sorted(backends), "store_kept": same_store,
                "changed": changed_sections(previous, config)}})
        task = asyncio.create_task(self._retire(old, old_life, config.server.shutdown_grace))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        return True

    async def _retire(self, old: Switchyard, life: Lifespan, grace: float) -> None:
        """Close the old app once the requests it holds are done (``grace`` seconds at most)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(old.gateway.drain(), grace)
        try:
            await life.stop()
        except Exception:
            log.exception("closing the previous config's app failed")


def hosted_engines_unchanged(old: Config, new: Config) -> None:
    """Under ``--workers`` a built-in engine or embedder runs in the supervisor, loaded from the
    config it started with: a worker cannot change it (ConfigError saying so; a restart can)."""
    from switchyard.engine.host import hosted_sockets  # no torch: the socket table only

    why = engine_change(old, new) if hosted_sockets() else None
    if why is not None:
        raise ConfigError(why)


def engine_change(old: Config, new: Config) -> str | None:
    """Why ``new`` cannot be swapped in where built-in models are hosted by the supervisor, if it
    cannot."""
    def engines(c: Config) -> dict[str, Any]:
        return {f"{m.name}/{d.name}": d for m in c.models for d in m.deployments
                if d.backend in BUILT_IN_BACKENDS}

    before, after = engines(old), engines(new)
    for name in sorted(before.keys() | after.keys()):
        if before.get(name) != after.get(name):
            what = (before.get(name) or after[name]).backend
            return (f"{what} deployment {name} changed: under --workers the {what} runs in the "
                    "supervisor with the config it started with; restart to apply it")
    return None


def changed_sections(a: Config, b: Config) -> list[str]:
    """The top-level config sections that differ (for the log line; no values, no secrets)."""
    return [name for name in type(a).model_fields if getattr(a, name) != getattr(b, name)]
