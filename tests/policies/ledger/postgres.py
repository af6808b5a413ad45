"""A PostgreSQL of the tests' own: ``initdb`` + ``pg_ctl`` in a temp dir, on a free loopback port.

Run as the ``postgres`` user when the tests run as root (PostgreSQL refuses to run as root).
A missing installation fails the test with what to install; nothing skips itself.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import free_port


def pg_bindir() -> Path:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(d, "initdb").exists() and Path(d, "pg_ctl").exists():
            return Path(d)
    pytest.fail("the ledger tests need PostgreSQL: set DATABASE_URL, or install PostgreSQL's server "
                "binaries (apt-get install postgresql; initdb and pg_ctl are looked for on PATH and in "
                "/usr/lib/postgresql/*/bin) so the tests can start their own", pytrace=False)


class PgServer:
    """``start()``, ``stop()`` (fast shutdown), ``start()`` again on the same data: a restart."""

    def __init__(self) -> None:
        self.bindir = pg_bindir()
        self.dir = Path(tempfile.mkdtemp(prefix="sy-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                pytest.fail("running as root, the tests need runuser to start PostgreSQL as the "
                            "postgres user", pytrace=False)
            self._as = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.dir, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync",
                  "-E", "UTF8")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        r = subprocess.run([*self._as, str(self.bindir / tool), *args], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.fail(f"{tool} failed ({r.returncode}): {r.stderr or r.stdout}", pytrace=False)

    def start(self) -> None:
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.dir / "log"), "-o", opts, "-w", "-t", "60",
                  "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def destroy(self) -> None:
        subprocess.run([*self._as, str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                        "-w", "stop"], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def postgres() -> Iterator[tuple[str, PgServer | None]]:
    """A server URL: $DATABASE_URL's, or that of a PostgreSQL started here (returned too, and
    destroyed on exit)."""
    if os.environ.get("DATABASE_URL"):
        yield os.environ["DATABASE_URL"], None
        return
    pg = PgServer()
    pg.start()
    try:
        yield pg.url, pg
    finally:
        pg.destroy()
