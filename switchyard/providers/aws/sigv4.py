"""AWS Signature Version 4 for one request (the ``Authorization``, ``X-Amz-Date`` and, for
temporary credentials, ``X-Amz-Security-Token`` headers), as botocore's ``SigV4Auth`` computes it.

The signature covers the method, the path, the query, the signed headers, the time and the
sha256 of the exact body, so it is made per request, after the body is final. The trap: outside
S3 the canonical URI encodes each path segment *again*, so a model id sent as ``...v1%3A0`` is
signed as ``...v1%253A0`` (botocore quotes the already-encoded path with ``safe='/~'``).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

_sha256 = hashlib.sha256
ALGORITHM = "AWS4-HMAC-SHA256"


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str | None = None  # a session token (temporary credentials)


def canonical_uri(path: str) -> str:
    """The path as sent (each segment already percent-encoded once), encoded once more; empty
    and ``.`` segments dropped as botocore does."""
    if "//" in path or "/./" in path or path.endswith("/."):
        kept = "/".join(s for s in path.split("/") if s and s != ".")
        path = "/" + kept + ("/" if path.endswith("/") else "")
    return quote(path or "/", safe="/~")


def canonical_query(query: str) -> str:
    """The query as sent (already encoded), its pairs sorted."""
    if not query:
        return ""
    return "&".join(f"{k}={v}" for k, v in sorted(p.partition("=")[::2] for p in query.split("&")))


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), _sha256).digest()


class SigV4:
    """Signs requests for one service and region with credentials read per request from
    ``credentials`` (static ones, or a refreshing chain's). The derived signing key is kept per
    (day, secret): four HMACs saved on nearly every request."""

    __slots__ = ("_credentials", "_key", "_key_for", "_scope_tail", "region", "service")

    def __init__(self, service: str, region: str, credentials: Callable[[], Credentials]) -> None:
        self.service = service
        self.region = region
        self._credentials = credentials
        self._key = b""
        self._key_for: tuple[str, str] = ("", "")
        self._scope_tail = f"/{region}/{service}/aws4_request"

    def _signing_key(self, day: str, secret: str) -> bytes:
        if self._key_for != (day, secret):
            k = _hmac(f"AWS4{secret}".encode(), day)
            k = _hmac(_hmac(_hmac(k, self.region), self.service), "aws4_request")
            self._key, self._key_for = k, (day, secret)
        return self._key

    def sign(self, method: str, host: str, path: str, query: str, headers: dict[str, str], body: bytes,
             now: float | None = None) -> dict[str, str]:
        """The headers to add to a request for ``host`` (with its port unless the scheme's
        default) at ``path``/``query`` (as sent) carrying ``headers`` (lower-case names; all of
        them are signed) and ``body``. ``now``: seconds since the epoch (a fixed clock for tests)."""
        creds = self._credentials()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
        added = {"x-amz-date": stamp}
        if creds.token:
            added["x-amz-security-token"] = creds.token
        signed = {**headers, "host": host, **added}
        names = sorted(signed)
        canonical_headers = "".join(f"{n}:{' '.join(signed[n].split())}\n" for n in names)
        signed_names = ";".join(names)
        canonical = "\n".join((method, canonical_uri(path), canonical_query(query), canonical_headers,
                               signed_names, _sha256(body).hexdigest()))
        day = stamp[:8]
        scope = day + self._scope_tail
        to_sign = f"{ALGORITHM}\n{stamp}\n{scope}\n{_sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(day, creds.secret_key), to_sign.encode(), _sha256).hexdigest()
        added["authorization"] = (f"{ALGORITHM} Credential={creds.access_key}/{scope}, "
                                  f"SignedHeaders={signed_names}, Signature={signature}")
        return added
