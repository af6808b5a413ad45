"""Logs: JSON lines (or a console format for a terminal) on stderr, from the standard library's
``logging``, which the whole code base uses. Keys never reach a log: only key ids are passed to a
logger, and an upstream's own words are scrubbed of its key before they are quoted.

Every line written while a request is served carries its request id (``REQUEST``, set at the
edge). The access log (one line per request) lives in ``switchyard.http.access``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

import msgspec

from switchyard.core.logs import REQUEST, iso

LEVEL_ENV = "SWITCHYARD_LOG_LEVEL"
FORMAT_ENV = "SWITCHYARD_LOG_FORMAT"
LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("json", "console")

_encode = msgspec.json.Encoder().encode


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": iso(record.created), "level": record.levelname.lower(),
                               "logger": record.name, "event": record.getMessage()}
        rid = REQUEST.get()
        if rid is not None:
            out["request_id"] = rid
        fields = getattr(record, "fields", None)  # logging's own ``extra=`` mechanism
        if fields:
            out.update(fields)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return _encode(out).decode()


class ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        rid = REQUEST.get()
        line = (f"{time.strftime('%H:%M:%S', time.localtime(record.created))} "
                f"{record.levelname:<7} {record.getMessage()}")
        fields = getattr(record, "fields", None)
        if fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        if rid is not None:
            line += f" request_id={rid}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def settings(level: str | None, fmt: str | None, default_level: str = "info",
             default_format: str = "json") -> tuple[str, str]:
    """The level and format in force: the command line, else the environment, else the config."""
    level = (level or os.environ.get(LEVEL_ENV) or default_level).lower()
    fmt = (fmt or os.environ.get(FORMAT_ENV) or default_format).lower()
    if level not in LEVELS:
        raise ValueError(f"log level {level!r}: must be one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: must be one of {', '.join(FORMATS)}")
    return level, fmt


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a line is written (as the access log does), not
    the stream of the moment it was made: a capture that has ended (pytest's) gets no more lines."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        pass


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    handler = _Stderr()
    handler.setFormatter(JsonFormatter() if fmt == "json" else ConsoleFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)  # libraries: warnings and worse
    for name in ("switchyard",):  # ours: "switchyard" and every module logger under it
        logging.getLogger(name).setLevel(level.upper())
    # httpx logs every request at INFO: a measurable cost per request on the hot path.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # Our 'started' line replaces uvicorn's; its errors still show.
    uv = logging.getLogger("uvicorn.error")
    uv.setLevel(logging.WARNING)
    if not any(isinstance(f, _GraceEnded) for f in uv.filters):
        uv.addFilter(_GraceEnded())


class _GraceEnded(logging.Filter):
    """uvicorn reports the end of ``shutdown_grace`` as an error; it is the configured behaviour
    (the requests it cuts are answered and settled as cut), so a warning, in our words."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and str(record.msg).startswith("Cancel %s running task"):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg = "server.shutdown_grace ran out: cutting %s request(s) still in flight"
        return True

