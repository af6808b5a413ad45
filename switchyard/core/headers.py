"""Header syntax (RFC 9110) and the headers never taken from a caller: what the config checks in a
deployment's own ``headers`` and allow-lists, and what the dialects check in a caller's.
"""

from __future__ import annotations

import re

# RFC 9110 5.6.2 token, and 5.5 field-value (VCHAR, obs-text, SP, HTAB; no CR, LF or NUL).
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,128}")
VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]{0,4096}")
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


def denied_header(low: str) -> bool:
    """A header name (lower case) never taken from a caller."""
    return low in DENIED_HEADERS or low.startswith(DENIED_PREFIXES)


def header_problem(name: str, value: str) -> str | None:
    """Why ``name: value`` cannot be a header line (RFC 9110), or None."""
    if not TOKEN.fullmatch(name):
        return "a header name is 1 to 128 token characters (RFC 9110)"
    if not VALUE.fullmatch(value):
        return ("a header value is at most 4096 Latin-1 characters without CR, LF, NUL or other "
                "control characters")
    return None
