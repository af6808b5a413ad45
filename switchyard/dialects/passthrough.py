"""What a caller may pass through to an upstream beyond the canonical request: SGP's
``inference_extra_headers`` and ``inference_extra_params``, and a dialect's unknown fields
(vendor extensions).

Passed-through bytes share the upstream connection and the upstream's trust in the gateway, so:
- header names and values are checked against RFC 9110 (a token; a field value without CR, LF or
  NUL, in Latin-1) when the request is parsed, before anything is sent;
- credentials, hop-by-hop and framing headers are never taken from a caller;
- no passed-through field may set anything the canonical request owns (any field a dialect table
  reads: the model, the prompt, max_tokens under any name, n, stream, sampling ...): those were
  validated and went through the key's limits;
- and beyond that only what the deployment allows (``allow_extra_headers``,
  ``allow_extra_params``, both empty by default) reaches it.
"""

from __future__ import annotations

from typing import Any

from switchyard.core.config import Config
from switchyard.core.errors import InvalidRequest
from switchyard.core.settings import ConfigError
from switchyard.dialects.registry import owned_fields
from switchyard.dialects.sgp import HEADERS_FIELD, PARAMS_FIELD


def allows(allowed: list[str], name: str) -> bool:
    """``name`` (a header name in lower case, or a body field) is on the allow-list."""
    return "*" in allowed or name in allowed


def check_allowed(deployment_name: str, allowed_headers: list[str], allowed_params: list[str],
                  headers: dict[str, str] | None, params: dict[str, Any] | None) -> None:
    """A 400 for passed-through headers or params this deployment does not take."""
    for name in headers or ():
        if not allows(allowed_headers, name):
            raise InvalidRequest(f"{HEADERS_FIELD}.{name}: deployment {deployment_name} does not take this "
                                 "header (allow_extra_headers)", param=f"{HEADERS_FIELD}.{name}")
    for name in params or ():
        if not allows(allowed_params, name):
            raise InvalidRequest(f"{PARAMS_FIELD}.{name}: deployment {deployment_name} does not take this "
                                 "parameter (allow_extra_params)", param=f"{PARAMS_FIELD}.{name}")


def vendor_fields(extra: dict[str, Any], allowed: list[str]) -> dict[str, Any]:
    """The caller's unknown fields a deployment of the caller's own dialect receives."""
    owned = owned_fields()
    return {k: v for k, v in extra.items() if k not in owned and allows(allowed, k)}


def check_config(cfg: Config) -> None:
    """A deployment's ``allow_extra_params`` may not name a field the gateway owns (check-config and
    app start run this: the dialect tables, not the config types, know what is owned)."""
    owned = owned_fields()
    for m in cfg.models:
        for d in m.deployments:
            for name in d.allow_extra_params:
                if name in owned:
                    raise ConfigError(f"models.{m.name}.deployments.{d.name}.allow_extra_params: {name!r} "
                                      "is set by the gateway from the request itself; it cannot be "
                                      "passed through")
