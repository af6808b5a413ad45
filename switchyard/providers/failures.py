"""An upstream's failures in the gateway's words: its HTTP errors (the retry policy itself is
``UpstreamError.from_status``), and answers that came with 200 but are not a success."""

from __future__ import annotations

from typing import Any

import msgspec

from switchyard.core.errors import UpstreamError

_decode = msgspec.json.decode
MAX_MESSAGE = 500  # characters of an upstream's error text relayed to the caller


class Scrubber:
    """Removes the deployment's own secret from any upstream text the gateway relays (an upstream
    may quote the key it was sent, e.g. "Incorrect API key provided: sk-...")."""

    def __init__(self, secret: str | None) -> None:
        self.secret = secret or None

    def __call__(self, text: str) -> str:
        if self.secret and self.secret in text:
            text = text.replace(self.secret, "[redacted]")
        return text[:MAX_MESSAGE]


def error_message(raw: bytes) -> str | None:
    """The message in an error body (OpenAI's ``{"error": {"message"}}``, FastAPI's
    ``{"detail"}``, a bare string, or plain text)."""
    try:
        obj = _decode(raw)
    except msgspec.DecodeError:
        text = raw.decode(errors="replace").strip()
        return text or None
    return message_of(obj)


def message_of(obj: Any) -> str | None:
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail")
            return str(msg) if msg else None
        if isinstance(err, str):
            return err
        detail = obj.get("detail")
        if detail:
            return str(detail)
    elif isinstance(obj, str):
        return obj
    return None


def retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def http_error(deployment: str, status: int, raw: bytes, retry_after_header: str | None,
               scrub: Scrubber) -> UpstreamError:
    """An upstream's 4xx/5xx. Its text is relayed (scrubbed, shortened) except for credential
    refusals, which ``from_status`` words itself."""
    message = error_message(raw)
    return UpstreamError.from_status(deployment, status, scrub(message) if message else None,
                                     retry_after(retry_after_header))


def error_in_answer(deployment: str, error: Any, scrub: Scrubber, *, mid_stream: bool) -> UpstreamError:
    """An ``error`` object inside a 200 answer or a stream event."""
    message = message_of({"error": error}) or "no message"
    where = "reported an error mid-stream" if mid_stream else "answered 200 with an error"
    return UpstreamError.broken(deployment, f"{where}: {scrub(message)}")
