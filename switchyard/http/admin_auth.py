"""Who may call /admin: a script with ``Authorization: Bearer <master_key>`` or ``Bearer <admin
token>`` (``switchyard.policies.admin_tokens``), or the console with its session cookie (and, on
every state-changing call, the session's CSRF token in a header). The caller becomes an
``Actor``; the route's ability (``switchyard.policies.roles.ROUTES``) must be in its role, and the
handlers narrow what it sees to its teams.

Wrong master keys and tokens are counted per client address, across /admin and /ui/login: after
``max_failures`` within ``window_s`` that address gets 429 (with Retry-After) until the oldest
failure leaves the window, whatever key it sends. Behind a reverse proxy the client address is
read from X-Forwarded-For, but only when the connection comes from ``server.trusted_proxies``
(else anyone could name any address); the same goes for X-Forwarded-Proto (the console cookie's
Secure flag).
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from typing import Any

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers import BaseRouteHandler

from switchyard.core.errors import Forbidden, RateLimited
from switchyard.core.logs import REQUEST
from switchyard.core.propagation import REQUEST_ID
from switchyard.http.oidc import Oidc, OidcError
from switchyard.http.sessions import COOKIE, CSRF_HEADER, Sessions, csrf_ok
from switchyard.policies.admin_tokens import PREFIX, AdminTokens
from switchyard.policies.audit import AuditLog
from switchyard.policies.roles import MASTER, ROUTES, Actor

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Proxies:
    """The reverse proxies whose X-Forwarded-For / X-Forwarded-Proto are believed."""

    def __init__(self, trusted: Iterable[str] = ()) -> None:
        self.nets: tuple[Network, ...] = tuple(ipaddress.ip_network(t, strict=False) for t in trusted)

    def trusts(self, addr: str) -> bool:
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            return False
        return any(ip in n for n in self.nets)

    def _from_proxy(self, scope: Any) -> bool:
        return bool(self.nets) and self.trusts((scope.get("client") or ("",))[0])

    def client(self, scope: Any) -> str:
        """The client's address: the peer's, or (from a trusted proxy) the right-most address in
        X-Forwarded-For that is not itself a trusted proxy."""
        peer = (scope.get("client") or ("",))[0] or "-"
        if not self._from_proxy(scope):
            return peer
        hops = [h.strip() for v in _header(scope, b"x-forwarded-for") for h in v.split(",") if h.strip()]
        for hop in reversed(hops):
            if not self.trusts(hop):
                return hop[:64]
        return hops[0][:64] if hops else peer

    def scheme(self, scope: Any) -> str:
        """http or https as the client used it (X-Forwarded-Proto from a trusted proxy)."""
        if self._from_proxy(scope):
            sent = [v.split(",")[0].strip().lower() for v in _header(scope, b"x-forwarded-proto")]
            if sent and sent[0] in ("http", "https"):
                return sent[0]
        return str(scope.get("scheme") or "http")


def _header(scope: Any, name: bytes) -> list[str]:
    return [v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == name]


class Failures:
    """Wrong master keys per client address in a sliding window (this replica's count)."""

    def __init__(self, max_failures: int = 10, window_s: float = 60.0, *, max_clients: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.max_clients = max_clients
        self.clock = clock
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, addr: str) -> deque[float] | None:
        times = self._seen.get(addr)
        if times is not None:
            cutoff = self.clock() - self.window_s
            while times and times[0] <= cutoff:
                times.popleft()
            if not times:
                del self._seen[addr]
                return None
        return times

    def retry_after(self, addr: str) -> int | None:
        """Seconds until ``addr`` may try again, or None when it may now."""
        times = self._recent(addr)
        if times is None or len(times) < self.max_failures:
            return None
        return max(1, math.ceil(times[0] + self.window_s - self.clock()))

    def failed(self, addr: str) -> None:
        times = self._recent(addr)
        if times is None:
            if len(self._seen) >= self.max_clients:
                self._seen.popitem(last=False)  # bounded: the least recently failing address goes
            times = self._seen[addr] = deque(maxlen=self.max_failures)
        times.append(self.clock())
        self._seen.move_to_end(addr)

    def succeeded(self, addr: str) -> None:
        self._seen.pop(addr, None)

    def check(self, addr: str) -> None:
        """Raise the 429 when ``addr`` has failed too often lately."""
        wait = self.retry_after(addr)
        if wait is not None:
            raise RateLimited(f"too many wrong master keys from this address; retry in {wait} s",
                              headers={"Retry-After": str(wait)})


def actor_of(conn: ASGIConnection[Any, Any, Any, Any]) -> Actor:
    """The actor the guard let in."""
    actor: Actor = conn.scope["state"]["actor"]
    return actor


class AdminAuth:
    def __init__(self, master_key: str | None, sessions: Sessions, *, failures: Failures | None = None,
                 proxies: Proxies | None = None, tokens: AdminTokens | None = None,
                 audit: AuditLog | None = None, oidc: Oidc | None = None,
                 master_key_login: bool = True) -> None:
        self.master_key = master_key
        self.sessions = sessions
        self.tokens = tokens if tokens is not None else AdminTokens(sessions.store)
        self.audit = audit if audit is not None else AuditLog(sessions.store)
        self.oidc = oidc  # single sign-on: the console's sign-in, and JWT access tokens on /admin
        self.master_key_login = master_key_login
        self.failures = failures if failures is not None else Failures()
        self.proxies = proxies if proxies is not None else Proxies()
        self._expected = f"Bearer {master_key}".encode() if master_key else None

    def __deepcopy__(self, memo: dict[int, Any]) -> AdminAuth:
        return self  # Litestar deep-copies routers with their guards; the store must stay shared

    def is_master_key(self, candidate: str) -> bool:
        """Constant-time: the time taken says nothing about how much of the key matched."""
        if self.master_key is None:
            return False
        return hmac.compare_digest(candidate.encode(), self.master_key.encode())

    async def record(self, conn: ASGIConnection[Any, Any, Any, Any], action: str, target: str, *,
                     before: Any = None, after: Any = None, teams: list[str] | None = None,
                     actor: Actor | None = None) -> None:
        """The change's one audit entry: who (the guard's actor unless given), from where."""
        who = actor if actor is not None else actor_of(conn)
        await self.audit.record(actor=who.as_dict(), action=action, target=target, before=before,
                                after=after, client=self.proxies.client(conn.scope),
                                request_id=REQUEST.get() or conn.headers.get(REQUEST_ID), teams=teams)

    async def guard(self, conn: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        actor = await self.authenticate(conn)
        method = conn.scope["method"]  # type: ignore[typeddict-item]  # guards HTTP routes only
        ability = ROUTES.get((method, conn.scope.get("path_template", "")))
        if ability is None:
            raise Forbidden("this route is open to no role")
        actor.reach(ability)
        conn.scope.setdefault("state", {})["actor"] = actor

    async def _access_token(self, token: str, addr: str) -> Actor:
        """The provider's JWT access token: checked against its keys, roles from the claims."""
        assert self.oidc is not None
        cfg = self.oidc.cfg
        try:
            claims = await self.oidc.verify(token, audience=cfg.audience or cfg.client_id)
            return self.oidc.actor(claims)
        except OidcError as e:
            self.failures.failed(addr)
            raise NotAuthorizedException(f"the access token was refused: {e}") from None

    async def authenticate(self, conn: ASGIConnection[Any, Any, Any, Any]) -> Actor:
        if self._expected is None:
            raise NotAuthorizedException("the admin API is disabled: no master_key is configured")
        auth = conn.headers.get("authorization")
        if auth is not None:
            addr = self.proxies.client(conn.scope)
            self.failures.check(addr)
            if hmac.compare_digest(auth.encode(), self._expected):
                self.failures.succeeded(addr)
                return MASTER
            bearer = auth[7:] if auth[:7].lower() == "bearer " else ""
            if self.oidc is not None and bearer.count(".") == 2 and not bearer.startswith(PREFIX):
                return await self._access_token(bearer, addr)
            actor = await self.tokens.actor(bearer) if bearer.startswith(PREFIX) else None
            if actor is None:
                self.failures.failed(addr)
                raise NotAuthorizedException("the admin API needs Authorization: Bearer <master_key> or "
                                             "a live admin token (this one is unknown, revoked or expired)"
                                             if bearer.startswith(PREFIX) else
                                             "the admin API needs Authorization: Bearer <master_key>")
            return actor  # the address's wrong master keys still count: a token does not clear them
        session = await self.sessions.get(conn.cookies.get(COOKIE))
        if session is None:
            raise NotAuthorizedException("the admin API needs Authorization: Bearer <master_key>")
        method = conn.scope["method"]  # type: ignore[typeddict-item]
        if method not in SAFE_METHODS and not csrf_ok(session, conn.headers.get(CSRF_HEADER)):
            raise PermissionDeniedException(f"a console call that changes state needs the {CSRF_HEADER} "
                                            "header of its session")
        return Actor.from_dict(session.actor) if session.actor else MASTER
