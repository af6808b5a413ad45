"""The gateway side of the engine: spawns and supervises the engine process, and turns
requests into messages and messages back into chunks. Imports no torch."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

from switchyard.core.canonical import CanonicalRequest, Chunk, replace
from switchyard.core.deployments import DeploymentConfig, EngineConfig
from switchyard.core.errors import InvalidRequest, Unavailable
from switchyard.engine import tools
from switchyard.engine.channel import AsyncChannel, error_of

log = logging.getLogger(__name__)
_ROOT = Path(__file__).resolve().parents[2]

RESTART_BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0)  # seconds between restarts of a crash-looping engine
# An engine process's return codes when a stop signal ended it (asyncio: minus the signal).
STOP_SIGNALS = frozenset({-signal.SIGTERM, -signal.SIGINT})


class EngineBackend:
    """The text-generating engine (``switchyard.engine.process``)."""

    process = "switchyard.engine.process"  # the module the engine process runs
    kinds: frozenset[str] = frozenset({"completion", "chat"})  # the request kinds it serves

    def __init__(self, deployment: DeploymentConfig) -> None:
        self.deployment = deployment
        self.config: EngineConfig = deployment.engine or EngineConfig()
        self._ready = False
        self._closing = False
        self._proc: Any = None
        self._chan: AsyncChannel | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._streams: dict[int, asyncio.Queue[tuple[Any, ...]]] = {}
        self._ids = itertools.count(1)
        self._context_window: int | None = None
        self.load_error: str | None = None
        self.restarts = 0
        self._stats: dict[str, float] = {}

    # -- Backend ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the engine process; it loads the model in the background (see ``ready``)."""
        if self._supervisor is None:
            await self._spawn()
            self._supervisor = asyncio.create_task(self._supervise(), name=f"engine:{self.deployment.name}")

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def context_window(self) -> int | None:
        return self._context_window

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def generate(self, req: CanonicalRequest,
                       upstream_model: str | None = None) -> AsyncGenerator[Chunk, None]:
        """``upstream_model`` (a wildcard route's name) means nothing here: one model is loaded."""
        if req.kind not in self.kinds:
            what = "serves embeddings only" if req.kind != "embedding" else "does not serve embeddings"
            raise InvalidRequest(f"model {req.model} {what}", param="model")
        req, tool_plan = tools.prepare(req)
        rewrite = tools.ToolCallStream(tool_plan).rewrite if tool_plan is not None else None
        rid, q = self._open("submit", req)
        finished = False
        try:
            while True:
                msg = await q.get()
                kind = msg[0]
                if kind == "chunk":
                    ch = msg[2] if rewrite is None else rewrite(msg[2])
                    if ch is not None:
                        yield ch
                elif kind == "done":
                    finished = True
                    return
                else:
                    finished = True
                    err = error_of(msg)
                    if tool_plan is not None and tool_plan.mode == "required" and err.param == "constraint":
                        err.param = "tools"  # the grammar came from the tools' parameter schemas
                    raise err
        finally:
            self._streams.pop(rid, None)
            if not finished and self._chan is not None:
                self._chan.send(("cancel", rid))

    def stats(self) -> dict[str, float]:
        return self._stats  # as the engine process last reported (see process.Meter)

    async def count_tokens(self, req: CanonicalRequest, *, exact: bool = False) -> int:
        rid, q = self._open("count", req)
        try:
            msg = await q.get()
        finally:
            self._streams.pop(rid, None)
        if msg[0] != "count":
            raise error_of(msg)
        return int(msg[2])

    async def reported_window(self, upstream_model: str | None = None) -> int | None:
        return None  # the engine's window is its own (context_window), never asked for

    async def aclose(self) -> None:
        self._closing = True
        self._ready = False
        if self._chan is not None:
            self._chan.send(("shutdown",))
        if self._supervisor is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._supervisor), 5.0)
            except (TimeoutError, asyncio.CancelledError):
                self._supervisor.cancel()
        await self._reap(kill_after=2.0)
        self._fail_all("engine is shutting down")

    # -- internals --------------------------------------------------------------------------

    def _open(self, kind: str, req: CanonicalRequest) -> tuple[int, asyncio.Queue[tuple[Any, ...]]]:
        if not self._ready or self._chan is None:
            raise Unavailable(self.load_error or "model is loading")
        rid = next(self._ids)
        q: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self._streams[rid] = q
        if req.native is not None:  # the caller's own bytes are for a native lane: not piped over
            req = replace(req, native=None)
        self._chan.send((kind, rid, req))
        return rid, q

    async def _spawn(self) -> None:
        # A fresh interpreter (not multiprocessing's spawn, which re-imports the parent's
        # __main__) that inherits one end of a socket pair. In a session of its own: a signal to
        # the gateway's process group (Ctrl-C, ``kill -TERM -PGID``) is the gateway's to handle,
        # which stops the engine through ``aclose``; it printed a KeyboardInterrupt traceback
        # and made the supervisor restart it mid-shutdown. Should the gateway die without
        # closing it, the engine reads EOF on the socket and exits.
        parent, child = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
        try:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", self.process, str(child.fileno()),
                json.dumps(self.config.model_dump()), pass_fds=(child.fileno(),), env=env,
                stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
        finally:
            child.close()
        self._chan = await AsyncChannel.open(parent)

    async def _supervise(self) -> None:
        failures = 0
        while True:
            started = time.monotonic()
            failed_load = await self._pump()
            self._ready = False
            self._fail_all("engine crashed; restarting" if not self._closing else "engine is shutting down")
            if self._chan is not None:
                self._chan.close()
            await self._reap(kill_after=1.0)
            if self._closing:
                return
            if failed_load:
                log.error("engine %s failed to load: %s", self.deployment.name, self.load_error)
                return
            failures = failures + 1 if time.monotonic() - started < 30 else 1
            delay = RESTART_BACKOFF[min(failures, len(RESTART_BACKOFF)) - 1]
            if self._proc is not None and self._proc.returncode in STOP_SIGNALS:
                # stopped from outside (a service manager signalling every process of the
                # service): the gateway's own shutdown is likely on its way; restart only if not
                await asyncio.sleep(delay)
                if self._closing:
                    return
                log.warning("engine %s was stopped by signal %d; restarting", self.deployment.name,
                            -self._proc.returncode)
            else:
                log.warning("engine %s exited; restarting in %.1fs", self.deployment.name, delay)
                await asyncio.sleep(delay)
            if self._closing:
                return
            self.restarts += 1
            await self._spawn()

    async def _pump(self) -> bool:
        """Route messages until the engine goes away; True when it reported a load failure."""
        assert self._chan is not None
        while True:
            msg = await self._chan.recv()
            if msg is None:
                self._stats = {}
                return False
            kind = msg[0]
            if kind == "ready":
                self._context_window = msg[1]["context_window"]
                self.load_error = None
                self._ready = True
            elif kind == "failed":
                self.load_error = f"engine failed to load: {msg[1]}"
                return True
            elif kind == "stats":
                self._stats = msg[1]
            elif kind == "batch":  # everything one engine step emitted
                streams = self._streams
                for m in msg[1]:
                    q = streams.get(m[1])
                    if q is not None:
                        q.put_nowait(m)
            else:
                q = self._streams.get(msg[1])
                if q is not None:
                    q.put_nowait(msg)

    def _fail_all(self, reason: str) -> None:
        for q in self._streams.values():
            q.put_nowait(("error", 0, "Unavailable", reason, None))
        self._streams.clear()

    async def _reap(self, kill_after: float) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        try:
            await asyncio.wait_for(proc.wait(), kill_after)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


class EmbedderBackend(EngineBackend):
    """The built-in embedding model in a process of its own (``switchyard.engine.embedder``):
    the same channel, supervision and restarts as the text engine."""

    process = "switchyard.engine.embedder"
    kinds = frozenset({"embedding"})
    _counter: Callable[[CanonicalRequest], int] | None = None

    async def count_tokens(self, req: CanonicalRequest, *, exact: bool = False) -> int:
        """Counted here with the model's tokenizer (no torch), not through the process: see
        ``embedder.token_counter``."""
        if self._counter is None:
            from switchyard.engine.embedder import token_counter

            self._counter = token_counter(self.config)
        return self._counter(req)

