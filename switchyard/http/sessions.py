"""Console sessions: a random id in an HttpOnly cookie, only its sha256 in the store.

The store keeps ``<ns>:session:<sha256(id)>`` -> ``{"csrf", "created_ms", "actor"}``
with a TTL, so every replica on the same store accepts the cookie and a leaked store dump holds no
usable session id. The CSRF token is sent in the page and must come back in a header on every
state-changing call made with the cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any

from switchyard.policies.store import Store

COOKIE = "sy_console"
CSRF_HEADER = "x-csrf-token"
TTL_S = 8 * 3600


@dataclass(frozen=True, slots=True)
class Session:
    csrf: str
    created_ms: int
    actor: dict[str, Any] | None = None  # who signed in (``roles.Actor.as_dict``); None: the master key


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class Sessions:
    def __init__(self, store: Store, *, ttl_s: int = TTL_S) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._prefix = f"{store.ns}:session:"

    async def create(self, actor: dict[str, Any] | None = None) -> tuple[str, Session]:
        """A new session: (the id for the cookie, its record)."""
        sid = secrets.token_urlsafe(32)
        s = Session(csrf=secrets.token_urlsafe(24), created_ms=int(time.time() * 1000), actor=actor)
        await self.store.put_doc(self._prefix + _hash(sid), {"csrf": s.csrf, "created_ms": s.created_ms,
                                                            "actor": actor}, ttl_ms=self.ttl_s * 1000)
        return sid, s

    async def get(self, session_id: str | None) -> Session | None:
        if not session_id or len(session_id) > 128:
            return None
        (doc,) = await self.store.get_docs([self._prefix + _hash(session_id)])
        if not doc or doc.get("ended"):
            return None
        return Session(csrf=doc["csrf"], created_ms=doc["created_ms"], actor=doc.get("actor"))

    async def end(self, session_id: str) -> None:
        await self.store.put_doc(self._prefix + _hash(session_id), {"ended": True}, ttl_ms=60_000)


def csrf_ok(session: Session, sent: str | None) -> bool:
    return sent is not None and hmac.compare_digest(sent.encode(), session.csrf.encode())
