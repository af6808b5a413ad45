"""Errors in the caller's dialect."""

from __future__ import annotations

from typing import Any

import msgspec

from switchyard.core.errors import GatewayError, InvalidRequest
from switchyard.dialects.anthropic import wire
from switchyard.dialects.registry import DIALECTS
from switchyard.dialects.spec import ErrorShape

_CHAT_SHAPE = ErrorShape()
# Answer shapes that are not a dialect's name take the errors of the product they belong to.
_PRODUCT = {"llamacpp_native": "llamacpp", "sgp_v5": "sgp", "sgp_chat": "sgp", "sgp_v5_chat": "sgp"}


def shape_of(shape: str, named: bool = False) -> ErrorShape:
    """The errors of answer shape ``shape`` (a renderer name); ``named``: the caller chose the
    dialect with x-switchyard-dialect."""
    d = DIALECTS.get(_PRODUCT.get(shape, shape))
    if d is None:
        return _CHAT_SHAPE
    return d.named_errors if named and d.named_errors is not None else d.errors


def error_json(dialect: str, err: GatewayError, named: bool = False) -> tuple[int, dict[str, Any]]:
    """(status, body) for ``err`` as a server of ``dialect`` would send it."""
    if dialect == "anthropic":  # Anthropic's own body, types and statuses (wire.ERROR_TYPE)
        return wire.error_body(err.status, err.message, err.param)
    shape = shape_of(dialect, named)
    status = err.status
    if isinstance(err, InvalidRequest) and status == 400:
        status = shape.validation_status
        if shape.detail:
            loc = ["body", *(err.param.split(".") if err.param else [])]
            return status, {"detail": [{"loc": loc, "msg": err.message, "type": "value_error"}]}
    code: Any = status if shape.code_is_status else _code(err.status)
    return status, openai_error(err.message, err.type, err.param, code)


def openai_error(message: str, type_: str, param: str | None = None, code: Any = None) -> dict[str, Any]:
    """OpenAI's error body; the one writer of it (completion endpoints, /admin, the console)."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_bytes(dialect: str, err: GatewayError, named: bool = False) -> tuple[int, bytes]:
    status, body = error_json(dialect, err, named)
    return status, msgspec.json.encode(body)


def _code(status: int) -> str | None:
    return {401: "invalid_api_key", 403: "model_not_allowed", 404: "model_not_found",
            413: "request_too_large", 429: "rate_limit_exceeded",
            503: "unavailable"}.get(status)
