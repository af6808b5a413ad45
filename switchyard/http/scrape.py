"""Serving ``/metrics``: this process's ``Recorder`` plus, under ``--workers N``, the counters
the other workers wrote to the shared metrics folder (``METRICS_DIR``; ``PROMETHEUS_MULTIPROC_DIR``
names it where set, else ``switchyard serve`` makes one per run).

Each worker rewrites its own file (``<pid>.json``, replaced atomically) once a second, and
once more when it stops: another worker's figures on a scrape are at most
about a second old. Counters of workers that have exited still count (a counter never goes
down); their gauges (in flight, breakers) do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import time
from pathlib import Path
from typing import Any

import msgspec
from prometheus_client import CollectorRegistry, generate_latest

from switchyard.gateway.pipeline import Gateway
from switchyard.http.admin_auth import AdminAuth
from switchyard.http.metrics import Families, Key, Recorder, Snapshot, gauges
from switchyard.policies.quotas import quota_family
from switchyard.policies.store import StoreDown

METRICS_DIR = "SWITCHYARD_METRICS_DIR"
PROMETHEUS_DIR = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FLUSH_EVERY = 1.0


def metrics_dir() -> Path | None:
    d = os.environ.get(METRICS_DIR) or os.environ.get(PROMETHEUS_DIR)
    return Path(d) if d else None


def prepare_dir(path: Path) -> None:
    """Before the workers start: the folder exists and holds no earlier run's figures."""
    path.mkdir(parents=True, exist_ok=True)
    for f in path.glob("*.json"):
        f.unlink(missing_ok=True)


def _rows(table: dict[str, dict[Key, Any]]) -> dict[str, list[list[Any]]]:
    return {name: [[list(k), v] for k, v in rows.items()] for name, rows in table.items()}


def _table(rows: dict[str, list[list[Any]]]) -> dict[str, dict[Key, Any]]:
    return {name: {tuple(k): v for k, v in items} for name, items in rows.items()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Exporter:
    def __init__(self, gw: Gateway, auth: AdminAuth) -> None:
        self.gw = gw
        self.auth = auth  # the master key opens /metrics too
        self.recorder = Recorder(gw.config)
        self.dir = metrics_dir()
        self.token = gw.config.metrics.token
        self._task: asyncio.Task[None] | None = None

    def allowed(self, authorization: str | None) -> bool:
        """Open unless ``metrics.token`` is set; then Bearer <token> or the master key."""
        if self.token is None:
            return True
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return False
        given = given.strip()
        ok = hmac.compare_digest(given.encode(), self.token.encode())
        ok |= self.auth.is_master_key(given)  # both compared, whichever matched
        return ok

    async def render(self) -> bytes:
        snap = Snapshot()
        snap.add(*self.recorder.tables(), gauges(self.gw))
        if self.dir is not None:
            self._add_others(snap)
        store = await self._ping()
        registry = CollectorRegistry(auto_describe=False)
        policies = self.gw.policies
        quotas = await quota_family(policies.store, policies.registry) if store[0] else None
        per_key = self.recorder.per_key
        registry.register(Families([*snap.families(per_key, store), *([quotas] if quotas else [])]))
        return generate_latest(registry)

    async def _ping(self) -> tuple[bool, float | None]:
        start = time.perf_counter()
        try:
            await self.gw.policies.store.ping()
        except StoreDown:
            return False, None
        return True, time.perf_counter() - start

    def _add_others(self, snap: Snapshot) -> None:
        assert self.dir is not None
        me = os.getpid()
        for f in self.dir.glob("*.json"):
            try:
                pid = int(f.stem)
                if pid == me:
                    continue
                doc = msgspec.json.decode(f.read_bytes())
            except (ValueError, OSError, msgspec.DecodeError):
                continue  # not ours, or being replaced right now
            snap.add(_table(doc["counts"]), _table(doc["hists"]),
                     _table(doc["gauges"]) if _alive(pid) else None)

    # -- this worker's file ------------------------------------------------------------------

    def start(self) -> None:
        if self.dir is not None and self._task is None:
            self._task = asyncio.create_task(self._flush_loop())

    def flush(self) -> None:
        assert self.dir is not None
        counts, hists = self.recorder.tables()
        doc = {"counts": _rows(counts), "hists": _rows(hists), "gauges": _rows(gauges(self.gw))}
        path = self.dir / f"{os.getpid()}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(msgspec.json.encode(doc))
        os.replace(tmp, path)

    async def _flush_loop(self) -> None:
        self.flush()  # at once: other workers see this one's gauges from the start
        while True:
            await asyncio.sleep(FLUSH_EVERY)
            # Gauges move without requests (a breaker's cooldown): written every second anyway.
            with contextlib.suppress(OSError):
                self.flush()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            with contextlib.suppress(OSError):
                self.flush()
