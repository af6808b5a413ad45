"""How long to wait before trying again. Whether to try again is the error's to say
(``GatewayError.retryable``, set where the error is made: see ``UpstreamError.from_status``)."""

from __future__ import annotations

import math
import random

from switchyard.core.errors import GatewayError
from switchyard.core.settings import RouterConfig

# With no deadline, the longest a request waits to try its deployment again (a Retry-After past
# it returns the 429 at once): the openai and anthropic SDKs honour a Retry-After up to 60 s.
PATIENCE = 60.0


def backoff(cfg: RouterConfig, attempt: int, rng: random.Random) -> float:
    """Seconds before re-trying a deployment: ``backoff_base * 2**(attempt-1)``, capped at
    ``backoff_max``, jittered into its upper half so replicas do not retry in lockstep."""
    d = min(cfg.backoff_max, cfg.backoff_base * (1 << min(attempt - 1, 30)))
    return d * (0.5 + 0.5 * rng.random())


def deadline_exceeded(timeout: float | None, attempts: int,
                      last: GatewayError | str | None = None) -> GatewayError:
    """``last``: the last attempt's failure, or the deployment it was waiting on (where the time
    went)."""
    if isinstance(last, GatewayError):
        why = f" (last: {last.message})"
    else:
        why = f" waiting on {last}" if last else ""
    return GatewayError(f"the request's deadline of {timeout:g} s ran out after {attempts} attempt(s){why}",
                        status=504, type="timeout_error")


def retry_after_header(e: GatewayError, cap: float) -> GatewayError:
    """Pass an upstream's Retry-After (at most ``cap`` seconds) on to the caller when we give up
    on a 429 or 503."""
    seconds = e.retry_after
    if seconds is not None and seconds > 0 and e.status in (429, 503):
        e.headers.setdefault("retry-after", str(max(1, math.ceil(min(seconds, cap)))))
    return e
