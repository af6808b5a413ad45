"""One built-in model shared by several worker processes (``switchyard serve --workers N``).

The supervisor process runs an ``EngineHost`` per built-in deployment (the text engine or the
embedder): it owns the model's process (an ``EngineBackend`` or ``EmbedderBackend``, which
restarts it if it dies) and serves the workers over a unix socket, speaking the same framed
messages that process speaks. Each worker attaches with a ``HostedEngine`` (``HostedEmbedder``),
a backend whose channel leads to the host instead of to a process of its own, so the model is
loaded once whatever the number of workers, and its batches mix requests from all of them.
Imports no torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.deployments import DeploymentConfig
from switchyard.core.errors import GatewayError
from switchyard.engine.backend import EmbedderBackend, EngineBackend
from switchyard.engine.channel import AsyncChannel, error_message
from switchyard.engine.process import Meter

# {"<group>/<deployment>": "/path/to/socket"}, set by the supervisor for its workers.
SOCKETS_ENV = "SWITCHYARD_ENGINE_SOCKETS"
# The built-in backends by ``deployment.backend``: each runs a model in a process of its own.
BUILT_IN: dict[str, type[EngineBackend]] = {"engine": EngineBackend, "embedder": EmbedderBackend}


def hosted_sockets() -> dict[str, str]:
    """The engine sockets this worker was given (none outside ``--workers``)."""
    raw = os.environ.get(SOCKETS_ENV)
    return json.loads(raw) if raw else {}


class EngineHost:
    """Serves one built-in model (engine or embedder) to any number of workers on a unix socket."""

    def __init__(self, deployment: DeploymentConfig, path: str) -> None:
        self.engine = BUILT_IN[deployment.backend](deployment)
        self.path = path
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.engine.start()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._server = await asyncio.start_unix_server(self._serve, self.path, limit=1 << 24)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._conns):
            task.cancel()
        await self.engine.aclose()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        chan = AsyncChannel(reader, writer)
        jobs: dict[int, asyncio.Task[None]] = {}
        announce = asyncio.create_task(self._announce(chan))
        try:
            while (msg := await chan.recv()) is not None and msg[0] != "shutdown":
                kind = msg[0]
                if kind == "cancel":
                    job = jobs.pop(msg[1], None)
                    if job is not None:
                        job.cancel()
                elif kind in ("submit", "count"):
                    job = asyncio.create_task(self._job(chan, kind, msg[1], msg[2]))
                    jobs[msg[1]] = job
                    job.add_done_callback(functools.partial(_forget, jobs, msg[1]))
        finally:
            announce.cancel()
            for job in list(jobs.values()):
                job.cancel()
            chan.close()
            self._conns.discard(task)

    async def _announce(self, chan: AsyncChannel) -> None:
        """Tells the worker the engine is ready once it is (it may still be loading), then passes
        on its gauges."""
        while not self.engine.ready:
            if self.engine.load_error is not None:
                chan.send(("failed", self.engine.load_error))
                return
            await asyncio.sleep(0.05)
        chan.send(("ready", {"context_window": self.engine.context_window}))
        while True:  # the engine's gauges, for each worker's /metrics
            await asyncio.sleep(Meter.EVERY)
            chan.send(("stats", self.engine.stats()))

    async def _job(self, chan: AsyncChannel, kind: str, rid: int, req: CanonicalRequest) -> None:
        try:
            if kind == "count":
                chan.send(("count", rid, await self.engine.count_tokens(req)))
                return
            gen = self.engine.generate(req)
            try:
                async for chunk in gen:
                    chan.send(("chunk", rid, chunk))
            finally:
                await gen.aclose()  # a cancelled job frees the engine's sequence
            chan.send(("done", rid))
        except GatewayError as e:
            chan.send(error_message(rid, e))


class HostedEngine(EngineBackend):
    """A worker's view of a shared engine: the engine's protocol, over the host's socket. If the
    host goes away the worker reconnects with the usual restart backoff."""

    def __init__(self, deployment: DeploymentConfig, path: str) -> None:
        super().__init__(deployment)
        self.path = path

    async def _spawn(self) -> None:
        while True:  # the host may be restarting: keep trying (the worker is not ready meanwhile)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.path)
                break
            except OSError:
                sock.close()
                if self._closing:
                    raise
                await asyncio.sleep(0.5)
        sock.setblocking(False)
        self._chan = await AsyncChannel.open(sock)

    async def _reap(self, kill_after: float) -> None:
        """Nothing to reap: the host owns the engine process."""


class HostedEmbedder(HostedEngine, EmbedderBackend):
    """A worker's view of a shared embedder: passes go through the host, tokens are counted here
    (``EmbedderBackend.count_tokens``)."""


HOSTED: dict[str, type[HostedEngine]] = {"engine": HostedEngine, "embedder": HostedEmbedder}


def built_in(name: str, deployment: DeploymentConfig) -> EngineBackend:
    """The backend of built-in deployment ``name`` ("<group>/<deployment>") in this process:
    attached to the supervisor's host under ``--workers``, else with a model process of its own."""
    path = hosted_sockets().get(name)
    if path is None:
        return BUILT_IN[deployment.backend](deployment)
    return HOSTED[deployment.backend](deployment, path)


def hosted_deployments(config: Any) -> list[tuple[str, DeploymentConfig]]:
    """``("<group>/<deployment>", deployment)`` for every built-in (engine, embedder) deployment."""
    return [(f"{m.name}/{d.name}", d) for m in config.models for d in m.deployments
            if d.backend in BUILT_IN]


@contextlib.contextmanager
def hosting(config: Any, directory: str) -> Iterator[None]:
    """Run every built-in deployment of ``config`` once, in a thread of this (the supervisor)
    process, with sockets under ``directory``, and tell the workers spawned meanwhile where."""
    deps = hosted_deployments(config)
    if not deps:
        yield
        return
    hosts = [EngineHost(dep, os.path.join(directory, f"engine{i}.sock")) for i, (_, dep) in enumerate(deps)]
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="engine-host", daemon=True)
    thread.start()

    async def start() -> None:
        for host in hosts:
            await host.start()

    asyncio.run_coroutine_threadsafe(start(), loop).result(60)
    os.environ[SOCKETS_ENV] = json.dumps({name: h.path for (name, _), h in zip(deps, hosts, strict=True)})
    try:
        yield
    finally:
        os.environ.pop(SOCKETS_ENV, None)

        async def stop() -> None:
            await asyncio.gather(*(h.aclose() for h in hosts))

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), loop).result(15)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def _forget(jobs: dict[int, asyncio.Task[None]], rid: int, _: object) -> None:
    """A job's done-callback: it no longer needs cancelling."""
    jobs.pop(rid, None)
