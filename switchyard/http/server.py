"""Serving the gateway: uvicorn with limits on slow clients, one or several worker processes on
one port, and a graceful stop.

Several workers share one listening socket (uvicorn's supervisor restarts any that dies). Limits
are only exact across processes when they live in a shared store, so ``--workers`` above 1 needs
Redis. On SIGTERM every worker stops accepting, finishes what is in flight (streams included) for
up to ``server.shutdown_grace`` seconds, settles usage, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from switchyard.core.config import Config, ConfigError, ServerConfig, load_config
from switchyard.http.app import create_app
from switchyard.http.disconnect import DISCONNECT, Disconnect
from switchyard.http.logs import configure_logging, settings
from switchyard.http.scrape import METRICS_DIR, metrics_dir, prepare_dir
from switchyard.http.version import package_version

log = logging.getLogger("switchyard")
CONFIG_ENV = "SWITCHYARD_CONFIG"  # the config file a worker process loads
_TIMEOUT_REPLY = b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"


class ServeConfig(uvicorn.Config):
    """uvicorn's settings plus the gateway's limits on slow clients (read by ``GuardedHttp``)."""

    def __init__(self, app: Any, server: ServerConfig, **kw: Any) -> None:
        super().__init__(app, **kw)
        self.header_timeout = server.header_timeout
        # The completion endpoints answer a slow body with their own 408 (gateway.asgi); this
        # backstop closes a connection whose body stalls anywhere else a little later.
        self.body_timeout = server.body_timeout + 5.0


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline for a request's headers (from the connection's
    first byte, or the previous response, to the end of the headers) and for its body. Without
    them a client that sends a header line a minute holds a connection forever (slowloris).
    Each request's scope also carries a ``Disconnect`` hook (extension ``switchyard.disconnect``)."""

    def __init__(self, config: ServeConfig, *args: Any, **kw: Any) -> None:
        super().__init__(config, *args, **kw)
        self._limits = config
        self._deadline: asyncio.TimerHandle | None = None
        self._hooks: list[Disconnect] = []

    def _arm(self, seconds: float) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:  # nothing answered yet: say why
            self.transport.write(_TIMEOUT_REPLY)
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """A request the HTTP parser refused (a bad header byte, a broken request line): answered
        in the gateway's error shape rather than uvicorn's plain text."""
        body = json.dumps({"error": {"message": f"malformed HTTP request: {msg}", "param": "headers",
                                     "type": "invalid_request_error", "code": None}}).encode()
        self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                             b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn types it as asyncio.Transport
        super().connection_made(transport)
        self._arm(self._limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)
        for hook in self._hooks:
            hook.fire()
        self._hooks.clear()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm(self._limits.header_timeout)
        hook = Disconnect()
        # Requests that stopped listening need no hook any more; pipelined ones keep theirs.
        self._hooks = [h for h in self._hooks if not h.done]
        self._hooks.append(hook)
        self.scope["extensions"] = {DISCONNECT: hook}  # type: ignore[dict-item]  # our own extension: an object

    def on_headers_complete(self) -> None:
        self._arm(self._limits.body_timeout)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()


def serve_config(app: Any, config: Config, host: str, port: int, **kw: Any) -> ServeConfig:
    s = config.server
    # No proxy-header rewriting, Server or Date headers: per-request work nobody here uses.
    # uvicorn's own lines go through our handler (gateway.logs): JSON like every other line.
    return ServeConfig(app, s, host=host, port=port, http=GuardedHttp, loop="uvloop",
                       access_log=False, log_level="warning", log_config=None, lifespan="on",
                       proxy_headers=False, server_header=False, date_header=False,
                       timeout_keep_alive=int(s.idle_timeout),
                       timeout_graceful_shutdown=int(s.shutdown_grace), **kw)


def _tune_gc() -> None:
    # Long-lived start-up objects leave the collector's view, and young collections run less
    # often: a request allocates a few hundred objects, almost all freed by reference counting.
    gc.freeze()
    gc.set_threshold(20_000, 50, 50)


def worker_app() -> Any:
    """The app of one worker process (uvicorn calls this in each; the config path comes in the
    environment)."""
    config = load_config(os.environ[CONFIG_ENV])
    configure_logging(*settings(None, None, config.logging.level, config.logging.format))
    app = create_app(config)
    _tune_gc()
    return app


def serve(config: Config, config_path: str, host: str, port: int, workers: int = 1) -> int:
    """Run until SIGTERM/SIGINT; the exit status (2: this config cannot be served so)."""
    configure_logging(*settings(None, None, config.logging.level, config.logging.format))
    if workers > 1 and config.store.url.startswith("memory://"):
        print(f"switchyard: --workers {workers} needs a shared store: with memory:// every worker "
              "would keep its own limits and usage (set store.url to redis://...)", file=sys.stderr)
        return 2
    # uvicorn re-raises the stop signal once it has shut down gracefully: under the default
    # handler that would end the process as "killed by SIGTERM" instead of a clean exit 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    if workers == 1:
        given = metrics_dir()
        if given is not None:  # a folder set for several processes: no earlier run's figures in it
            prepare_dir(given)

        try:
            app = create_app(config)
        except ConfigError as e:
            log.error("cannot serve this config: %s", e)
            return 2
        _tune_gc()
        _started(config, host, port, workers)
        uvicorn.Server(serve_config(app, config, host, port)).run()
        log.info("switchyard stopped")
        return 0
    os.environ[CONFIG_ENV] = os.path.abspath(config_path)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    cfg = serve_config("switchyard.http.server:worker_app", config, host, port, factory=True, workers=workers)
    from uvicorn.supervisors import Multiprocess

    with tempfile.TemporaryDirectory(prefix="switchyard-") as run_dir, _engines(config, run_dir):
        # Every worker's /metrics adds up all workers' figures, kept in files in one folder.
        metrics = metrics_dir() or Path(run_dir) / "metrics"
        prepare_dir(metrics)
        os.environ[METRICS_DIR] = str(metrics)
        _started(config, host, port, workers)
        Multiprocess(cfg, sockets=[sock]).run()
    log.info("switchyard stopped")
    return 0


def _started(config: Config, host: str, port: int, workers: int) -> None:

    log.info("switchyard started", extra={"fields": {
        "version": package_version(), "address": f"http://{host}:{port}", "workers": workers,
        "models": [m.name for m in config.models], "store": redacted(config.store.url),
        "metrics": config.metrics.enabled, "tracing": config.tracing.otlp_endpoint is not None}})


def redacted(url: str) -> str:
    """A URL without its password (redis://:secret@host -> redis://***@host)."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    return f"{scheme}{sep}***@{host}" if at and userinfo else url


def _engines(config: Config, run_dir: str) -> contextlib.AbstractContextManager[None]:
    """The built-in engines, loaded once in this process and shared by the workers."""
    if not any(d.backend == "engine" for m in config.models for d in m.deployments):
        return contextlib.nullcontext()
    from switchyard.engine.host import hosting  # only an engine config needs the engine package

    return hosting(config, run_dir)
