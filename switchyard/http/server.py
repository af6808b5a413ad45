"""Serving the gateway: uvicorn's server with our HTTP protocol (``http.protocol``: limits on slow
clients), one or several worker processes on one port, and a graceful stop.

Several workers share one listening socket (uvicorn's supervisor restarts any that dies). Limits
are only exact across processes when they live in a shared store, so ``--workers`` above 1 needs
Redis. On SIGTERM every worker stops accepting, finishes what is in flight (streams included) for
up to ``server.shutdown_grace`` seconds, settles usage, and the process exits 0.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import logging
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.supervisors import Multiprocess

from switchyard.core.config import Config
from switchyard.core.deployments import BUILT_IN_BACKENDS
from switchyard.core.settings import ConfigError, master_key_file
from switchyard.http.checked import load_checked
from switchyard.http.logs import configure_logging, settings
from switchyard.http.protocol import ServeConfig
from switchyard.http.reload import Reloadable, engine_change
from switchyard.http.scrape import METRICS_DIR, metrics_dir, prepare_dir
from switchyard.http.verdict import PID_FILE_ENV, remove, write_verdict
from switchyard.http.version import package_version
from switchyard.policies.factory import NOT_KEPT, state_kept

log = logging.getLogger("switchyard")
CONFIG_ENV = "SWITCHYARD_CONFIG"  # the config file a worker process loads


def serve_config(app: Any, config: Config, host: str, port: int, **kw: Any) -> ServeConfig:
    s = config.server
    # No proxy-header rewriting, Server or Date headers: per-request work nobody here uses.
    # uvicorn's own lines go through our handler (gateway.logs): JSON like every other line.
    return ServeConfig(app, s, host=host, port=port, loop="uvloop",
                       access_log=False, log_level="warning", log_config=None, lifespan="on",
                       proxy_headers=False, server_header=False, date_header=False,
                       timeout_keep_alive=int(s.idle_timeout),
                       timeout_graceful_shutdown=int(s.shutdown_grace), **kw)


def _tune_gc() -> None:
    # Long-lived start-up objects leave the collector's view, and young collections run less
    # often: a request allocates a few hundred objects, all freed by reference counting when it
    # answers (test_request_life checks that it leaves no cycle), so under load they rarely run.
    gc.freeze()
    gc.set_threshold(20_000, 50, 50)


def worker_app() -> Any:
    """The app of one worker process (uvicorn calls this in each; the config path comes in the
    environment)."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the app's lifespan listens for it
    path = os.environ[CONFIG_ENV]
    config = load_checked(path)
    configure_logging(*settings(None, None, config.logging.level, config.logging.format))
    app = Reloadable(path, config, pid_file=os.environ.get(PID_FILE_ENV), worker=True)
    _tune_gc()
    return app


class Supervisor(Multiprocess):
    """uvicorn's worker supervisor, except that SIGHUP reloads the config in every worker
    (checked here first: a bad file reaches none of them) instead of restarting them all."""

    def __init__(self, config_path: str, started: Config, *args: Any, pid_file: str | None = None,
                 **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.config_path = config_path
        self.started = started  # the engines hosted here were loaded from it
        self.pid_file = pid_file

    def handle_hup(self) -> None:
        try:
            why = engine_change(self.started, load_checked(self.config_path))
        except ConfigError as e:
            why = str(e)
        if why is not None:
            log.error("reload refused, the running config is unchanged: %s", why)
            write_verdict(self.pid_file, False, f"reload refused, the running config is unchanged: {why}")
            return
        pids = [p.pid for p in self.processes if p.pid is not None]
        log.info("reloading the config in %d workers", len(pids))
        # Each worker writes its own verdict (its reload may still fail); the command waits for them.
        write_verdict(self.pid_file, True, workers=pids)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGHUP)


def serve(config: Config, config_path: str, host: str, port: int, workers: int = 1,
          pid_file: str | None = None) -> int:
    """Run until SIGTERM/SIGINT; the exit status (2: this config cannot be served so)."""
    configure_logging(*settings(None, None, config.logging.level, config.logging.format))
    if workers > 1 and config.store.url.startswith(("memory://", "sqlite://")):
        # sqlite:// shares its file, but its counters are the process's own, as memory://'s.
        scheme = config.store.url.partition("://")[0]
        print(f"switchyard: --workers {workers} needs a shared store: with {scheme}:// every worker "
              "would keep its own rate limits, concurrency slots and quotas (set store.url to "
              "redis://...)", file=sys.stderr)
        return 2
    # uvicorn re-raises the stop signal once it has shut down gracefully: under the default
    # handler that would end the process as "killed by SIGTERM" instead of a clean exit 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the app (or the supervisor) listens for it
    try:  # bound before anything is loaded or "started" is said: a taken port fails at once
        sock = _bind(host, port)
    except OSError as e:
        log.error("cannot listen on %s:%d: %s", host, port, e.strerror or e)
        return 1
    port = sock.getsockname()[1]  # the one the system chose for port 0
    with _pid_file(pid_file):
        return _serve(config, config_path, host, port, workers, sock, pid_file)


def _serve(config: Config, config_path: str, host: str, port: int, workers: int,
           sock: socket.socket, pid_file: str | None = None) -> int:
    if workers == 1:
        given = metrics_dir()
        if given is not None:  # a folder set for several processes: no earlier run's figures in it
            prepare_dir(given)

        try:
            app = Reloadable(config_path, config, pid_file=pid_file)
        except ConfigError as e:
            log.error("cannot serve this config: %s", e)
            return 2
        _tune_gc()
        _started(config, host, port, workers)
        uvicorn.Server(serve_config(app, config, host, port)).run(sockets=[sock])
        log.info("switchyard stopped")
        return 0
    os.environ[CONFIG_ENV] = os.path.abspath(config_path)
    sock.set_inheritable(True)
    cfg = serve_config("switchyard.http.server:worker_app", config, host, port, factory=True, workers=workers)
    with tempfile.TemporaryDirectory(prefix="switchyard-") as run_dir, _engines(config, run_dir):
        # Every worker's /metrics adds up all workers' figures, kept in files in one folder.
        metrics = metrics_dir() or Path(run_dir) / "metrics"
        prepare_dir(metrics)
        os.environ[METRICS_DIR] = str(metrics)
        _started(config, host, port, workers)
        if pid_file is not None:
            pid_file = os.environ[PID_FILE_ENV] = os.path.abspath(pid_file)
        Supervisor(os.environ[CONFIG_ENV], config, cfg, sockets=[sock], pid_file=pid_file).run()
    log.info("switchyard stopped")
    return 0


@contextlib.contextmanager
def _pid_file(path: str | None) -> Iterator[None]:
    """This process's id in ``path`` while it serves (``switchyard reload --pid-file`` reads it)."""
    if path is None:
        yield
        return
    Path(path).write_text(f"{os.getpid()}\n")
    try:
        yield
    finally:
        Path(path).unlink(missing_ok=True)
        remove(path)
        for worker in Path(path).parent.glob(glob.escape(Path(path).name) + ".reload.*"):
            worker.unlink(missing_ok=True)


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _started(config: Config, host: str, port: int, workers: int) -> None:
    console: dict[str, str] = {}
    if config.master_key is not None:  # the console: one step away (sign in with the master key)
        console["console"] = f"http://{host}:{port}/ui"
        key_file = master_key_file()
        if key_file.is_file() and key_file.read_text().strip() == config.master_key:
            console["master_key_file"] = str(key_file)  # master_key: auto (the key itself never)
    log.info("switchyard started", extra={"fields": {
        "version": package_version(), "address": f"http://{host}:{port}", "workers": workers, **console,
        "models": [m.name for m in config.models], "store": redacted(config.store.url),
        "admin_state": state_kept(config.store.url) or "not kept",
        "metrics": config.metrics.enabled, "tracing": config.tracing.otlp_endpoint is not None}})
    if state_kept(config.store.url) is None:
        log.warning(NOT_KEPT)


def redacted(url: str) -> str:
    """A URL without its password (redis://:secret@host -> redis://***@host)."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    return f"{scheme}{sep}***@{host}" if at and userinfo else url


def _engines(config: Config, run_dir: str) -> contextlib.AbstractContextManager[None]:
    """The built-in engines and embedders, loaded once in this process and shared by the workers."""
    if not any(d.backend in BUILT_IN_BACKENDS for m in config.models for d in m.deployments):
        return contextlib.nullcontext()
    from switchyard.engine.host import hosting  # only a built-in model needs the engine package

    return hosting(config, run_dir)
