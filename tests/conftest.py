"""Shared fixtures. ``redis_url``: $REDIS_URL when set, else a throwaway redis-server of our own."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


# Client sockets take their local ports from the kernel's ephemeral range, so a port picked there
# (as binding port 0 does) may be taken by any connection of a parallel test before the server
# under test binds it ("Address already in use"). Ports below that range are only ever bound.
_BELOW = range(10_000, _ephemeral_low())
_pick = random.SystemRandom()  # not the global one: hypothesis seeds that


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(bus: bool = False) -> int:
    """A free loopback port below the ephemeral range; with ``bus`` also port + 10000 (Redis
    Cluster's bus port), below it too. Where the range leaves too little room below it, a port
    from the range, as binding port 0 gives (racy, as above)."""
    top = _BELOW.stop - (10_000 if bus else 0)
    while True:
        if top - _BELOW.start >= 1_000:
            port = _pick.randrange(_BELOW.start, top)
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        if _bindable(port) and (not bus or (port + 10_000 <= 65_535 and _bindable(port + 10_000))):
            return port


def wait_for_redis(port: int, proc: subprocess.Popen[bytes] | None = None, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"redis-server on port {port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"redis-server on port {port} did not answer PING within {timeout} s")


def redis_server_bin() -> str:
    path = shutil.which("redis-server")
    if path is None:
        pytest.fail("these tests need a Redis: set REDIS_URL, or install redis-server (apt-get install "
                    "redis-server) so the tests can start their own", pytrace=False)
    return path


def start_redis(port: int, *extra: str, cwd: str | None = None) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [redis_server_bin(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         *extra],
        cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_redis(port, proc)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis for the whole session. Tests keep apart by key namespace (or FLUSHDB their own db)."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="sy-redis-") as d:
        proc = start_redis(port, cwd=d)
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            stop(proc)
