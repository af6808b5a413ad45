"""Errors that reach the caller. Each carries its HTTP status and, where one is to blame, the
parameter; the caller's dialect decides the body's shape (see ``switchyard.dialects``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from switchyard.core.canonical import Usage


class GatewayError(Exception):
    """``retryable``: another attempt (elsewhere, or later) may succeed; the router retries only
    before the first chunk. ``deployment_fault``: the deployment that answered is to blame, so the
    failure counts against its health. ``retry_after``: seconds the deployment asked us to stay
    away. The router reads these three and nothing else (no status codes): one policy, declared
    where the error is made."""

    status: int = 500
    type: str = "server_error"
    retryable: bool = False
    deployment_fault: bool = False
    retry_after: float | None = None
    # Which check refused, for usage records and the console ("" = derived from the class:
    # ``switchyard.policies.refusals.reason_of``).
    reason: str = ""
    # The usage an upstream reported in an answer that failed anyway (a JSON body for a stream):
    # it did the work, so the request is billed it.
    billed: Usage | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if status is not None:
            self.status = status
        if type is not None:
            self.type = type
        self.headers = headers or {}


class InvalidRequest(GatewayError):
    """A parameter is missing, of the wrong type, or out of its documented range."""

    status = 400
    type = "invalid_request_error"


class Unauthorized(GatewayError):
    status = 401
    type = "authentication_error"


class Forbidden(GatewayError):
    status = 403
    type = "permission_error"


class NotFound(GatewayError):
    status = 404
    type = "not_found_error"


class MethodNotAllowed(GatewayError):
    status = 405
    type = "invalid_request_error"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"


class RequestTimeout(GatewayError):
    """The request's body did not arrive in time (server.body_timeout)."""

    status = 408
    type = "invalid_request_error"


class UnsupportedMediaType(GatewayError):
    """A body in an encoding or content type the gateway does not read."""

    status = 415
    type = "invalid_request_error"


class RateLimited(GatewayError):
    """A limit or quota refused the request; ``headers`` carries Retry-After."""

    status = 429
    type = "rate_limit_error"
    limit = ""  # which limit refused ("rpm", "tpm", "concurrency", a quota ...), for /metrics
    scope = ""  # whose: "key", "team" or "model" (the team's limits for one model)


class Unavailable(GatewayError):
    """The model is loading, a backend cannot serve now, or the store is down (fail-closed). From a
    backend it is that deployment's state: another deployment may serve."""

    status = 503
    type = "service_unavailable"
    retryable = True
    deployment_fault = True


class UpstreamError(GatewayError):
    """An upstream answered with an error, could not be reached, or timed out. Make them with the
    constructors below: they are the retry policy (``from_status`` for HTTP errors)."""

    type = "upstream_error"

    def __init__(self, message: str, *, status: int, retryable: bool = False,
                 deployment_fault: bool = True, retry_after: float | None = None,
                 param: str | None = None, type: str | None = None) -> None:
        super().__init__(message, status=status, param=param, type=type)
        self.retryable = retryable
        self.deployment_fault = deployment_fault
        self.retry_after = retry_after

    @classmethod
    def from_status(cls, deployment: str, status: int, message: str | None,
                    retry_after: float | None = None) -> UpstreamError:
        """An upstream's HTTP error. Retried (before the first byte): 408, 429, 500, 502, 503,
        504. A 4xx other than 408/429 is the caller's request refused: its status and message
        pass through and the deployment is not blamed. 401/403/407 mean the upstream refused the
        gateway's own credentials: a 502 in the gateway's words (the upstream's text may quote
        the key). 501 is a feature the upstream lacks: not blamed. The caller sees upstream
        server errors as 502 (503 and 504 keep their meaning), naming the status it got."""
        if status in CREDENTIAL_REFUSED:
            return cls(f"upstream {deployment} refused the gateway's credentials (HTTP {status})",
                       status=502)
        caller = (400 <= status < 500 and status not in (408, 429)) or status == 501
        shown = 502 if status >= 500 and status not in (503, 504) else status
        said = f"HTTP {status}: {message}" if message and shown != status else message or f"HTTP {status}"
        return cls(f"upstream {deployment}: {said}", status=shown,
                   retryable=status in RETRY_STATUSES, deployment_fault=not caller,
                   retry_after=retry_after if status in (429, 503) else None,
                   type="rate_limit_error" if status == 429 else
                   "invalid_request_error" if caller and status < 500 else None)

    @classmethod
    def unreachable(cls, deployment: str, why: str) -> UpstreamError:
        """No answer began: connect error, reset, malformed head. Retried."""
        return cls(f"upstream {deployment} is unreachable: {why}", status=502, retryable=True)

    @classmethod
    def timed_out(cls, deployment: str, *, callers_deadline: bool,
                  mid_response: bool = False) -> UpstreamError:
        """A timeout: retried before the first byte; blamed on the deployment only when its own
        timeout ran out (a caller's short deadline is the caller's choice)."""
        where = " mid-response" if mid_response else ""
        return cls(f"upstream {deployment} timed out{where}", status=504, retryable=not mid_response,
                   deployment_fault=not callers_deadline)

    @classmethod
    def busy(cls, deployment: str, why: str) -> UpstreamError:
        """No connection to the deployment came free in time (other requests hold them all):
        load, not the deployment's failure. Retried (elsewhere, while the deadline lasts)."""
        return cls(f"upstream {deployment} is busy: {why}", status=503, retryable=True,
                   deployment_fault=False)

    @classmethod
    def broken(cls, deployment: str, what: str) -> UpstreamError:
        """The upstream answered, but not with a usable success (a broken stream, a malformed or
        error-carrying body): not retried (it may have done, and billed, the work)."""
        return cls(f"upstream {deployment} {what}", status=502)


# Statuses worth another attempt before the first byte: request timeout, rate limited, and the
# server errors that mean "not now" rather than "never".
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
CREDENTIAL_REFUSED = frozenset({401, 403, 407})


DISTRIBUTION = "switchyard-gateway"  # the PyPI name; "switchyard" there is somebody else's project


def install_hint(extra: str) -> str:
    """How to install an optional extra of this project (never the unrelated ``switchyard`` on PyPI)."""
    return f"pip install '{DISTRIBUTION}[{extra}]' (from a checkout: pip install -e '.[{extra}]')"
