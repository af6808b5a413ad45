"""Who may call /admin: a script with ``Authorization: Bearer <master_key>``, or the console with
its session cookie (and, on every state-changing call, the session's CSRF token in a header)."""

from __future__ import annotations

import hmac
from typing import Any

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers import BaseRouteHandler

from switchyard.http.sessions import COOKIE, CSRF_HEADER, Sessions, csrf_ok

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class AdminAuth:
    def __init__(self, master_key: str | None, sessions: Sessions) -> None:
        self.master_key = master_key
        self.sessions = sessions
        self._expected = f"Bearer {master_key}".encode() if master_key else None

    def __deepcopy__(self, memo: dict[int, Any]) -> AdminAuth:
        return self  # Litestar deep-copies routers with their guards; the store must stay shared

    def is_master_key(self, candidate: str) -> bool:
        """Constant-time: the time taken says nothing about how much of the key matched."""
        if self.master_key is None:
            return False
        return hmac.compare_digest(candidate.encode(), self.master_key.encode())

    async def guard(self, conn: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        if self._expected is None:
            raise NotAuthorizedException("the admin API is disabled: no master_key is configured")
        auth = conn.headers.get("authorization")
        if auth is not None:
            if not hmac.compare_digest(auth.encode(), self._expected):
                raise NotAuthorizedException("the admin API needs Authorization: Bearer <master_key>")
            return
        session = await self.sessions.get(conn.cookies.get(COOKIE))
        if session is None:
            raise NotAuthorizedException("the admin API needs Authorization: Bearer <master_key>")
        method = conn.scope["method"]  # type: ignore[typeddict-item]  # guards HTTP routes only
        if method not in SAFE_METHODS and not csrf_ok(session, conn.headers.get(CSRF_HEADER)):
            raise PermissionDeniedException(f"a console call that changes state needs the {CSRF_HEADER} "
                                            "header of its session")
