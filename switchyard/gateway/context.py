"""One request's context: made at the edge, carried along the path, read when the request ends.

The canonical request says what the caller asked for and is not changed after parsing; everything
the gateway learns or decides while serving it lives here: who asked, where it was routed, the
admission ticket, what was produced, which deployments were tried, and how long each part took.
The access log, the metrics and the trace read this object; nothing else needs to reach around an
interface to find out what happened.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from switchyard.core.ids import hex_id
from switchyard.gateway.streaming import Tally
from switchyard.policies.attribution import NONE, Attribution
from switchyard.routing.resolve import RunInfo

if TYPE_CHECKING:
    from switchyard.core.canonical import Usage
    from switchyard.core.errors import GatewayError
    from switchyard.guards.run import GuardRun
    from switchyard.policies.base import Principal, Ticket
    from switchyard.routing.resolve import Route

# What a caller may send as its request id: it goes into logs, spans, headers and the ledger.
_ID = re.compile(r"[A-Za-z0-9._:+=/-]{1,128}")


def request_ids(given: str | None) -> tuple[str, str]:
    """The request's id for the caller (its ``x-request-id`` when short and plain, else a fresh
    one) and the gateway's own, which upstream calls carry (the same when the caller gave none)."""
    own = hex_id(16)
    if given and _ID.fullmatch(given):
        return given, own
    return own, own


@dataclass(slots=True, eq=False)
class RequestContext:
    id: str
    endpoint: str  # the path served
    started: float = field(default_factory=time.monotonic)
    dialect: str = ""  # the caller's dialect, once known
    shape: str = "chat"  # the answer and error shape (a renderer name)
    dialect_named: bool = False  # the caller chose its dialect (x-switchyard-dialect): FastAPI's 422 errors
    principal: Principal | None = None
    requested_model: str = ""  # as the caller named it
    route: Route | None = None
    deadline: float | None = None  # time.monotonic() instant the request must end by
    ticket: Ticket | None = None
    tally: Tally | None = None
    run: RunInfo = field(default_factory=RunInfo)
    stream: bool = False
    status: int = 0  # what the caller was told (499: it left first)
    error_type: str | None = None
    error: GatewayError | None = None  # what the caller was told, when it was an error
    first_byte: float | None = None  # time.monotonic() of the first body byte sent
    cut: bool = False  # a stream that ended before its last event
    warning: str | None = None  # x-switchyard-warning, if any
    cache: str = ""  # the response cache's part: hit, miss, stored or bypass ("": off)
    usage: Usage | None = None  # what was charged, once settled
    attribution: Attribution = NONE  # tags, end user, session (policies.attribution)
    # time.monotonic() instants around admission and settlement (the trace's child spans; the
    # metrics read admit_at)
    admit_at: float | None = None
    admitted_at: float | None = None
    settle_at: float | None = None
    settled_at: float | None = None
    span: object = None  # the request's trace span (gateway.tracing), when tracing is on
    trace_id: str | None = None  # its trace id (32 hex digits), for the access log
    guards: GuardRun | None = None  # the guardrails that apply to it, when any do

    @property
    def latency(self) -> float:
        """Seconds since the request arrived."""
        return time.monotonic() - self.started

    @property
    def ttfb(self) -> float | None:
        """Seconds to the first body byte, or None when none was sent."""
        return None if self.first_byte is None else self.first_byte - self.started

    @property
    def upstream(self) -> float | None:
        """Seconds from the first upstream attempt to the end of the answer (retries and their
        backoff included), or None when no deployment was called."""
        run = self.run
        if run.upstream_start is None:
            return None
        return (run.upstream_end or time.monotonic()) - run.upstream_start

    @property
    def known_model(self) -> str | None:
        """The model the caller named, when it is a configured name, alias or pinned deployment:
        what logs and spans may record (a typo, or a wildcard's any name, may be a pasted key)."""
        route = self.route
        return self.requested_model if route is not None and route.upstream_model is None else None

    @property
    def spend_usd(self) -> float:
        """What was charged, at the serving deployment's price (0 before settlement, and when
        it has no price: ``unpriced``)."""
        ticket = self.ticket
        return ticket.cost_nano / 1e9 if ticket is not None and ticket.settled else 0.0

    @property
    def unpriced(self) -> bool:
        """Settled, and served by a deployment without a known price."""
        return self.ticket is not None and self.ticket.unpriced

    @property
    def group(self) -> str | None:
        """The model group that admitted the request."""
        return self.route.group if self.route is not None else None
