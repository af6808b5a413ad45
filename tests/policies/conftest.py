"""Policy fixtures: every store kind (memory, SQLite, Redis, a 3-node Redis Cluster), configs, a
limiter."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from switchyard.core.config import Config, parse_config
from switchyard.policies.limits import Limiter
from switchyard.policies.memory import MemoryStore
from switchyard.policies.pricing import Pricing
from switchyard.policies.redis_store import RedisStore
from switchyard.policies.sqlite_store import SqliteStore
from switchyard.policies.store import Store
from tests.conftest import free_port, start_redis, stop


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """Three masters on loopback, each in its own directory, slots spread by redis-cli."""
    ports = [free_port(bus=True) for _ in range(3)]
    with tempfile.TemporaryDirectory(prefix="sy-cluster-") as root:
        procs = []
        try:
            for p in ports:
                d = f"{root}/{p}"
                subprocess.run(["mkdir", "-p", d], check=True)
                procs.append(start_redis(p, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                         "--cluster-node-timeout", "2000", cwd=d))
            cli = shutil.which("redis-cli")
            if cli is None:
                pytest.fail("the cluster tests need redis-cli next to redis-server", pytrace=False)
            subprocess.run([cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                            "--cluster-replicas", "0", "--cluster-yes"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
            deadline = time.monotonic() + 20
            while True:
                states = [subprocess.run([cli, "-p", str(p), "cluster", "info"], capture_output=True,
                                         text=True, timeout=5).stdout for p in ports]
                if all("cluster_state:ok" in s for s in states):
                    break
                if time.monotonic() > deadline:
                    pytest.fail(f"the test cluster did not reach cluster_state:ok: {states}", pytrace=False)
                time.sleep(0.1)
            yield "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)
        finally:
            for proc in procs:
                stop(proc)


@pytest.fixture(params=["memory", "sqlite", "redis", "cluster"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """The same contract, every store. A fresh namespace per test keeps tests apart."""
    ns = f"t{uuid.uuid4().hex[:10]}"
    if request.param == "memory":
        s: Any = MemoryStore(ns=ns)
    elif request.param == "sqlite":
        s = SqliteStore(tmp_path / "state.db", ns=ns)
    else:
        url = request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url")
        s = RedisStore.from_url(url, timeout=2.0, ns=ns)  # generous: CI machines stall
    yield s
    await s.aclose()


def make_config(**overrides: Any) -> Config:
    """A config with teams ml (keys alice, bob) and ops (key carol); models priced for spend tests."""
    raw: dict[str, Any] = {
        "master_key": "master-secret-0123456",
        "models": [
            {"name": "openai/gpt-4o", "deployments": [{"name": "oai", "base_url": "http://127.0.0.1:9"}],
             "price": {"prompt_per_1m": 2.5, "completion_per_1m": 10.0}},
            {"name": "local/smol", "aliases": ["smol"],
             "deployments": [{"name": "eng", "base_url": "http://127.0.0.1:9"}]},
        ],
        "teams": [{"name": "ml"}, {"name": "ops"}],
        "keys": [{"id": "alice", "team": "ml", "key": "sk-alice"},
                 {"id": "bob", "team": "ml", "key": "sk-bob"},
                 {"id": "carol", "team": "ops", "key": "sk-carol"}],
    }
    for k, v in overrides.items():
        raw[k] = v
    return parse_config(raw)


@pytest.fixture
def limiter_for(store: Store) -> Iterator[Any]:
    """limiter_for(config) -> a Limiter over the test's store with that config's prices."""
    made: list[Limiter] = []

    def make(config: Config, **kw: Any) -> Limiter:
        lim = Limiter(store, Pricing(config), **kw)
        made.append(lim)
        return lim

    yield make
