"""An upstream's failures in the gateway's words: its HTTP errors (the retry policy itself is
``UpstreamError.from_status``), and answers that came with 200 but are not a success."""

from __future__ import annotations

import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import msgspec

from switchyard.core.errors import UpstreamError

_decode = msgspec.json.decode
MAX_MESSAGE = 500  # characters of an upstream's error text relayed to the caller
# Upstreams that refuse a wrong key with a 400, and what their body says then: Google's APIs
# (google.rpc.ErrorInfo reason API_KEY_INVALID, status INVALID_ARGUMENT).
KEY_REFUSED_400 = (b'"API_KEY_INVALID"',)


class Scrubber:
    """Removes the deployment's own secret from any upstream text the gateway relays (an upstream
    may quote the key it was sent, e.g. "Incorrect API key provided: sk-...")."""

    def __init__(self, *secrets: str | None) -> None:
        self.secrets = tuple(s for s in secrets if s)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "[redacted]")
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
    """Retry-After in seconds or as an HTTP date (RFC 9110), as seconds from now."""
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        return max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def retry_after_of(header: Callable[[str], str | None]) -> float | None:
    """``retry-after-ms`` (Azure, Anthropic, OpenAI send it beside the other) first, else
    ``retry-after``."""
    ms = header("retry-after-ms")
    if ms is not None:
        try:
            return max(float(ms) / 1000, 0.0)
        except ValueError:
            pass
    return retry_after(header("retry-after"))


def http_error(deployment: str, status: int, raw: bytes, retry_after_s: float | None,
               scrub: Scrubber, retry_statuses: frozenset[int] | None = None) -> UpstreamError:
    """An upstream's 4xx/5xx. Its text is relayed (scrubbed, shortened) except for credential
    refusals, which ``from_status`` words itself. ``retry_statuses``: the provider's own
    retryable statuses beyond the common ones (Anthropic's 529 overloaded)."""
    if status == 400 and any(marker in raw for marker in KEY_REFUSED_400):
        status = 401  # the gateway's own credential refused, whatever the status says
    message = error_message(raw)
    err = UpstreamError.from_status(deployment, status, scrub(message) if message else None, retry_after_s)
    if retry_statuses is not None and status in retry_statuses and not err.retryable:
        err.retryable, err.deployment_fault, err.retry_after = True, True, retry_after_s
        err.status, err.type = 503, "overloaded_error" if status == 529 else err.type
    return err


class transport_errors:  # a lower-case name: used as ``with transport_errors(...)``
    """httpx's exceptions in the gateway's words (the one map at this I/O boundary, as httpx's
    own ``map_httpcore_exceptions``): before an answer began, a timeout or an unreachable upstream
    (both retried); after, a timeout or a broken-off response (not retried). A class, not a
    generator context manager: it is entered twice a request and costs nothing unless one raises."""

    __slots__ = ("callers_deadline", "deployment", "mid_response")

    def __init__(self, deployment: str, *, callers_deadline: bool, mid_response: bool = False) -> None:
        self.deployment, self.callers_deadline, self.mid_response = deployment, callers_deadline, mid_response

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: object) -> None:
        if not isinstance(e, httpx.TransportError):  # timeouts are transport errors too
            return
        dep = self.deployment
        if isinstance(e, httpx.PoolTimeout):  # every connection busy until the deadline (h1.py): load
            raise UpstreamError.busy(dep, str(e)) from None
        if isinstance(e, httpx.TimeoutException):
            raise UpstreamError.timed_out(dep, callers_deadline=self.callers_deadline,
                                          mid_response=self.mid_response) from None
        if self.mid_response:
            raise UpstreamError.broken(dep, f"broke off the response: {type(e).__name__}") from None
        raise UpstreamError.unreachable(dep, type(e).__name__) from None


def wire_failure(deployment: str, what: str, said: str | None, scrub: Scrubber, *,
                 retryable: bool = False, status: int = 502) -> UpstreamError:
    """A codec's ``WireError`` in the gateway's words: an answer that is not a usable success.
    Retryable only when the codec says nothing of it reached the caller (an in-band overload)."""
    text = f"{what}: {scrub(said)}" if said else what
    if retryable:
        return UpstreamError(f"upstream {deployment} {text}", status=status, retryable=True)
    return UpstreamError.broken(deployment, text)
