"""Errors that reach the caller. Each carries its HTTP status and, where one is to blame, the
parameter; the caller's dialect decides the body's shape (see ``gateway.dialects``)."""

from __future__ import annotations


class GatewayError(Exception):
    status: int = 500
    type: str = "server_error"

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


class RateLimited(GatewayError):
    """A limit or quota refused the request; ``headers`` carries Retry-After."""

    status = 429
    type = "rate_limit_error"


class Unavailable(GatewayError):
    """The model is loading, every deployment is cooling down, or the store is down (fail-closed)."""

    status = 503
    type = "service_unavailable"


class UpstreamError(GatewayError):
    """An upstream answered with an error (its status passes through) or could not be reached
    (502) or timed out (504). ``retryable`` tells the router whether another attempt may help."""

    type = "upstream_error"

    def __init__(self, message: str, *, status: int, retryable: bool = False,
                 retry_after: float | None = None, param: str | None = None,
                 type: str | None = None) -> None:
        super().__init__(message, status=status, param=param, type=type)
        self.retryable = retryable
        self.retry_after = retry_after
