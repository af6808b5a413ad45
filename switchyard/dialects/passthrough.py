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

import re
from functools import cache
from typing import Any

from switchyard.core.errors import InvalidRequest

# RFC 9110 5.6.2 token, and 5.5 field-value (VCHAR, obs-text, SP, HTAB; no CR, LF or NUL).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,128}")
_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]{0,4096}")
MAX_EXTRA_HEADERS = 32
# Never from a caller: credentials (the gateway's own go upstream), and what frames or routes the
# message on the shared connection.
DENIED_HEADERS = frozenset({
    "authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie", "cookie2", "set-cookie",
    "host", "content-length", "content-type", "content-encoding", "transfer-encoding", "connection",
    "keep-alive", "te", "trailer", "upgrade", "expect", "via", "http2-settings", "forwarded",
    "x-real-ip", "x-request-id", "traceparent", "tracestate",
})
# ... nor any of these families: proxy credentials and hop-by-hop fields, client identity as a
# proxy reports it, browser fetch metadata, the gateway's own namespace.
DENIED_PREFIXES = ("proxy-", "x-forwarded-", "sec-", "x-switchyard-")
HEADERS_FIELD = "inference_extra_headers"
PARAMS_FIELD = "inference_extra_params"


# Canonical fields that are no dialect's body field (the request's envelope as rendered).
_ENVELOPE = frozenset({"model", "prompt", "messages", "stream", "stream_options"})


@cache
def owned_fields() -> frozenset[str]:
    """Every body field any dialect table reads into the canonical request (model, prompt,
    max_tokens under every name, n, best_of, stream, logprobs, echo, sampling, constraints ...):
    what the gateway validates, accounts for and writes itself. Derived from the tables, so a
    field a dialect gains is owned at once; passed-through fields may only be what no table
    knows (vendor extensions)."""
    from switchyard.dialects.chat import CHAT
    from switchyard.dialects.llamacpp import LLAMACPP_NATIVE
    from switchyard.dialects.registry import DIALECTS

    return frozenset({p.name for d in (*DIALECTS.values(), CHAT, LLAMACPP_NATIVE) for p in d.params}
                     | _ENVELOPE)


def denied_header(low: str) -> bool:
    """A header name (lower case) never taken from a caller."""
    return low in DENIED_HEADERS or low.startswith(DENIED_PREFIXES)


def header_problem(name: str, value: str) -> str | None:
    """Why ``name: value`` cannot be a header line (RFC 9110), or None."""
    if not _TOKEN.fullmatch(name):
        return "a header name is 1 to 128 token characters (RFC 9110)"
    if not _VALUE.fullmatch(value):
        return ("a header value is at most 4096 Latin-1 characters without CR, LF, NUL or other "
                "control characters")
    return None


def extra_headers(value: Any) -> dict[str, str]:
    """``inference_extra_headers``, checked (a ``Param.parse``)."""
    if len(value) > MAX_EXTRA_HEADERS:
        raise InvalidRequest(f"{HEADERS_FIELD} allows at most {MAX_EXTRA_HEADERS} headers "
                             f"(got {len(value)})", param=HEADERS_FIELD)
    out: dict[str, str] = {}
    for name, v in value.items():
        shown = name.encode("unicode_escape").decode()[:64]  # control characters escaped too
        where = f"{HEADERS_FIELD}.{shown}"
        if not _TOKEN.fullmatch(name):
            raise InvalidRequest(f"{where}: {header_problem(name, '')}", param=where)
        low = name.lower()
        if denied_header(low):
            raise InvalidRequest(f"{where}: the {low} header is never taken from a caller", param=where)
        if not isinstance(v, str):
            raise InvalidRequest(f"{where} must be a string", param=where)
        why = header_problem(name, v)
        if why is not None:
            raise InvalidRequest(f"{where}: {why}", param=where)
        if low in out:
            raise InvalidRequest(f"{where}: given twice", param=where)
        out[low] = v
    return out


def extra_params(value: Any) -> dict[str, Any]:
    """``inference_extra_params``, checked (a ``Param.parse``)."""
    for name in value:
        if name in owned_fields():
            raise InvalidRequest(f"{PARAMS_FIELD} cannot set {name}: the gateway sets it from the "
                                 "request's own fields (validated, and counted against the key's "
                                 "limits); send it there",
                                 param=f"{PARAMS_FIELD}.{name}")
    return value


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
