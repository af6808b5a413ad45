"""Requests refused before admission: recorded like any other, without slowing anyone down.

A caller whose key is known gets a usage record (status, reason, no tokens) in its team's stream
and aggregates, exactly as a settled request does (one store call, sent without waiting, like
settle). A request with no valid key is only counted, per reason, never per presented key.
``reason_of`` names the check that refused: the same words in records, the ledger, the console.
A limit's reason names its scope too: ``rate_limit:rpm@key``, ``quota:spend_day@team``,
``rate_limit:tpm@model`` (the team's limits for one model).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable

from switchyard.core.errors import (
    Forbidden,
    GatewayError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    RequestTimeout,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
    UpstreamError,
)
from switchyard.core.ids import hex_id
from switchyard.policies.base import Principal
from switchyard.policies.store import Store, StoreDown, UsageRecord

log = logging.getLogger("switchyard.policies")

# RateLimited.limit -> reason.
LIMIT_REASONS = {
    "rpm": "rate_limit:rpm", "tpm": "rate_limit:tpm", "too_large": "rate_limit:too_large",
    "concurrency": "rate_limit:concurrency", "tokens_per_day": "quota:tokens_day",
    "tokens_per_month": "quota:tokens_month", "spend_per_day": "quota:spend_day",
    "spend_per_month": "quota:spend_month", "tokens_per_session": "quota:tokens_session",
    "spend_per_session": "quota:spend_session",
}
_INDEX = re.compile(r"\[\d+\]")


def _param(e: GatewayError) -> str:
    # Indices folded ("messages[3]" -> "messages[]") and the length capped: a caller's request
    # must not mint reasons at will.
    return _INDEX.sub("[]", e.param or "body")[:48]


# The first row whose class matches names the reason (subclasses before their bases).
_REASONS: tuple[tuple[type[GatewayError], Callable[[GatewayError], str]], ...] = (
    (RateLimited, lambda e: LIMIT_REASONS.get(getattr(e, "limit", ""), "rate_limit")
     + (f"@{getattr(e, 'scope', '')}" if getattr(e, "scope", "") else "")),
    (Forbidden, lambda e: "model_not_allowed" if e.param == "model" else "forbidden"),
    (NotFound, lambda e: "model_not_found" if e.param == "model" else "not_found"),
    (PayloadTooLarge, lambda e: f"too_large:{_param(e)}"),
    (MethodNotAllowed, lambda e: "method_not_allowed"),
    (RequestTimeout, lambda e: "request_timeout"),
    (UnsupportedMediaType, lambda e: "unsupported_media_type"),
    (InvalidRequest, lambda e: f"bad_request:{_param(e)}"),
    (Unauthorized, lambda e: "invalid_key"),
    (UpstreamError, lambda e: f"upstream:{e.status}"),
    (Unavailable, lambda e: "unavailable"),
)


def reason_of(e: GatewayError) -> str:
    if e.reason:
        return e.reason
    for cls, name in _REASONS:
        if isinstance(e, cls):
            return name(e)
    return f"error:{e.status}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Refusals:
    """Record refused requests off the request's path; failures are dropped (logged once per
    outage): a refusal carries no tokens or spend to reconcile. After a failure the store is
    left alone for ``down_for`` seconds, so a flood of refusals during an outage costs nothing."""

    def __init__(self, store: Store, down_for: float = 1.0) -> None:
        self.store = store
        self.down_for = down_for
        self.dropped = 0  # refusals not recorded (the store was down)
        self._tasks: set[asyncio.Task[None]] = set()
        self._down = False
        self._skip_until = 0.0

    def _skipping(self) -> bool:
        if time.monotonic() < self._skip_until:
            self.dropped += 1
            return True
        return False

    def refused(self, p: Principal, *, model: str, status: int, reason: str, latency_ms: float,
                request_id: str = "", endpoint: str = "", dialect: str = "",
                requested_model: str = "", guardrails: str = "") -> None:
        if self._skipping():
            return
        rec = UsageRecord(ts_ms=now_ms(), key_id=p.key_id, team=p.team, model=model, deployment="",
                          prompt_tokens=0, completion_tokens=0, cached_tokens=0, cost_nano=0,
                          status=status, latency_ms=round(latency_ms, 3), request_id=request_id,
                          ticket_id="r" + hex_id(9), endpoint=endpoint, dialect=dialect,
                          requested_model=requested_model[:200], reason=reason, guardrails=guardrails)
        try:
            pending = self.store.refuse_nowait(p.team, rec)
        except Exception:
            log.exception("recording a refusal failed")
            return
        if pending is not None:
            self._track(pending)

    def unauthenticated(self, reason: str) -> None:
        if self._skipping():
            return
        self._track(self.store.count_unauthenticated(reason, now_ms()))

    def _track(self, pending: Awaitable[None]) -> None:
        task = asyncio.ensure_future(self._wait(pending))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _wait(self, pending: Awaitable[None]) -> None:
        try:
            await pending
            self._down = False
        except StoreDown as e:
            self.dropped += 1
            self._skip_until = time.monotonic() + self.down_for
            if not self._down:
                self._down = True
                log.warning("refused requests are not recorded while the store is down: %s", e)
        except Exception:
            log.exception("recording a refusal failed")

    async def flush(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
