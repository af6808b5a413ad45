"""How ``switchyard reload --pid-file F`` learns what the server made of its SIGHUP.

A signal carries nothing back, so the answer goes through files beside the pid file:

- ``F.reload-request``: the reload command writes a fresh token there, then signals;
- ``F.reload``: the server (or, under ``--workers``, the supervisor) writes its verdict for the
  token it found: ``{"token", "ok", "reason", "workers"}``; ``workers`` lists the processes the
  supervisor passed the reload on to;
- ``F.reload.<pid>``: each of those workers' own verdict (its reload may still fail: a resource
  the new config names cannot be set up).

The command waits for the verdicts carrying its token and exits non-zero with the reasons when
any process refused. Every file is written whole (a rename), so a reader never sees half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

PID_FILE_ENV = "SWITCHYARD_PID_FILE"  # the pid file, for worker processes (they write verdicts)


def request_path(pid_file: str | Path) -> Path:
    return Path(f"{pid_file}.reload-request")


def verdict_path(pid_file: str | Path, pid: int | None = None) -> Path:
    return Path(f"{pid_file}.reload" + (f".{pid}" if pid is not None else ""))


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def ask(pid_file: str | Path) -> str:
    """A fresh token in the request file (before signalling); returns it."""
    token = secrets.token_hex(8)
    _write(request_path(pid_file), token + "\n")
    return token


def write_verdict(pid_file: str | Path | None, ok: bool, reason: str = "", *,
                  workers: list[int] | None = None, worker: bool = False) -> None:
    """This process's verdict on the reload just asked for (nothing without a pid file). Never
    raises: a verdict that cannot be written leaves the command to time out, not the server to fail."""
    if pid_file is None:
        return
    with contextlib.suppress(OSError):
        try:
            token = request_path(pid_file).read_text().strip()
        except FileNotFoundError:
            token = ""  # a bare kill -HUP: nobody waits, the verdict is still written
        body = {"token": token, "ok": ok, "reason": reason, "pid": os.getpid(), "workers": workers or []}
        _write(verdict_path(pid_file, os.getpid() if worker else None), json.dumps(body) + "\n")


def remove(pid_file: str | Path, pid: int | None = None) -> None:
    """The files of one process (its verdict; the server's own also the request)."""
    for p in ((verdict_path(pid_file, pid),) if pid is not None
              else (verdict_path(pid_file), request_path(pid_file))):
        p.unlink(missing_ok=True)


def _read(path: Path, token: str) -> dict[str, Any] | None:
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) and body.get("token") == token else None


def wait(pid_file: str | Path, token: str, timeout: float) -> tuple[bool, list[str]]:
    """Wait for the verdicts on ``token``: (every process reloaded, the reasons of those that did
    not, or why no verdict came)."""
    deadline = time.monotonic() + timeout
    top: dict[str, Any] | None = None
    while top is None:
        top = _read(verdict_path(pid_file), token)
        if top is None:
            if time.monotonic() > deadline:
                return False, [f"no verdict from the server within {timeout:g} s (is it the process "
                               f"in {pid_file}? its log says what it did)"]
            time.sleep(0.05)
    if not top["ok"]:
        return False, [str(top.get("reason") or "refused")]
    waiting = {int(p) for p in top.get("workers") or ()}
    reasons: list[str] = []
    while waiting:
        for pid in sorted(waiting):
            got = _read(verdict_path(pid_file, pid), token)
            if got is not None:
                waiting.discard(pid)
                if not got["ok"]:
                    reasons.append(f"worker {pid}: {got.get('reason') or 'refused'}")
        if waiting and time.monotonic() > deadline:
            reasons.append(f"no verdict within {timeout:g} s from worker(s) {sorted(waiting)}")
            break
        if waiting:
            time.sleep(0.05)
    return not reasons, reasons
