"""``/ui``: the console's pages and assets, and signing in and out.

Signing in trades the master key for a session cookie (HttpOnly, SameSite=Strict, Secure over
https); the key itself is never written into a page, a script or the store. A wrong key gets the
sign-in page again after a fixed delay, never data.
"""

from __future__ import annotations

import asyncio
import html
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from litestar import Request, Response, Router, get, post
from litestar.datastructures import Cookie
from litestar.params import FromPath

from switchyard.http.admin import error_response
from switchyard.http.admin_auth import AdminAuth
from switchyard.http.sessions import COOKIE, CSRF_HEADER, csrf_ok
from switchyard.policies.roles import MASTER, Actor
from switchyard.policies.store import StoreDown

STATIC = Path(__file__).parent / "static"
_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
# Assets by name, read once: only these names are ever served (no path is built from a request).
ASSETS: dict[str, tuple[bytes, str]] = {p.name: (p.read_bytes(), _TYPES[p.suffix])
                                        for p in sorted(STATIC.iterdir()) if p.suffix in _TYPES}
APP_HTML = (STATIC / "app.html").read_text()
SIGNIN_HTML = (STATIC / "signin.html").read_text()

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = {"content-security-policy": CSP, "x-content-type-options": "nosniff",
                    "referrer-policy": "no-referrer", "x-frame-options": "DENY",
                    "cache-control": "no-store"}
WRONG_KEY_DELAY_S = 0.5  # the same for every wrong key: guessing stays slow, timing says nothing
MAX_FORM_BYTES = 4096
NOBODY = Actor(id="anonymous", role="none", kind="anonymous")  # a failed sign-in's actor


def _page(body: str, status: int = 200, cookies: list[Cookie] | None = None) -> Response[Any]:
    return Response(body, status_code=status, media_type="text/html; charset=utf-8",
                    headers=SECURITY_HEADERS, cookies=cookies or [])


def signin_page(message: str = "", status: int = 200) -> Response[Any]:
    note = f'<p class="error" role="alert">{html.escape(message)}</p>' if message else ""
    return _page(SIGNIN_HTML.replace("<!--message-->", note), status)


def console_pages(auth: AdminAuth) -> Router:
    sessions = auth.sessions

    @get("/", include_in_schema=False)
    async def ui(request: Request[Any, Any, Any]) -> Response[Any]:
        if auth.master_key is None:
            return signin_page("The console is disabled: the gateway has no master_key.", 503)
        session = await sessions.get(request.cookies.get(COOKIE))
        if session is None:
            return signin_page()
        return _page(APP_HTML.replace("{{csrf}}", html.escape(session.csrf)))

    @post("/login", status_code=303, include_in_schema=False)
    async def login(request: Request[Any, Any, Any]) -> Response[Any]:
        addr = auth.proxies.client(request.scope)
        wait = auth.failures.retry_after(addr)
        if wait is not None:  # guessing: refused whatever key comes, until the window moves on
            page = signin_page(f"Too many wrong master keys from this address; try again in {wait} s.", 429)
            page.headers["retry-after"] = str(wait)
            return page
        raw = await request.body()
        form = parse_qs(raw[:MAX_FORM_BYTES].decode("utf-8", "replace"))
        key = (form.get("master_key") or [""])[0]
        if len(raw) > MAX_FORM_BYTES or not auth.is_master_key(key):
            auth.failures.failed(addr)
            await auth.record(request, "console.sign_in_failed", "master_key", actor=NOBODY)
            await asyncio.sleep(WRONG_KEY_DELAY_S)
            return signin_page("Wrong master key.", 401)
        auth.failures.succeeded(addr)
        sid, _ = await sessions.create(MASTER.as_dict())
        await auth.record(request, "console.sign_in", "master_key", actor=MASTER)
        # Secure when the client came over https, also through a TLS-terminating proxy we trust.
        cookie = Cookie(key=COOKIE, value=sid, path="/", httponly=True, samesite="strict",
                        secure=auth.proxies.scheme(request.scope) == "https", max_age=sessions.ttl_s)
        return Response("", status_code=303, headers=SECURITY_HEADERS | {"location": "/ui"}, cookies=[cookie])

    @post("/logout", status_code=303, include_in_schema=False)
    async def logout(request: Request[Any, Any, Any]) -> Response[Any]:
        sid = request.cookies.get(COOKIE)
        session = await sessions.get(sid)
        if session is not None and sid is not None:
            if not csrf_ok(session, request.headers.get(CSRF_HEADER)):
                return error_response(403, "permission_error", f"sign out needs the {CSRF_HEADER} header")
            await sessions.end(sid)
            who = Actor.from_dict(session.actor) if session.actor else MASTER
            await auth.record(request, "console.sign_out", who.id, actor=who,
                              teams=sorted(who.teams) if who.teams is not None else None)
        gone = Cookie(key=COOKIE, value="", path="/", httponly=True, samesite="strict", max_age=0,
                      secure=auth.proxies.scheme(request.scope) == "https")
        return Response("", status_code=303, headers=SECURITY_HEADERS | {"location": "/ui"}, cookies=[gone])

    @get("/static/{name:str}", include_in_schema=False)
    async def asset(name: FromPath[str]) -> Response[Any]:
        found = ASSETS.get(name)
        if found is None:
            return Response("not found", status_code=404, media_type="text/plain", headers=SECURITY_HEADERS)
        body, media_type = found
        return Response(body, media_type=media_type, headers=SECURITY_HEADERS | {"cache-control": "no-cache"})

    def store_down(_: Request[Any, Any, Any], e: StoreDown) -> Response[Any]:
        page = signin_page("The policy store is unavailable, so sessions cannot be checked; try again "
                           "shortly.", 503)
        page.headers["retry-after"] = "1"
        return page

    return Router(path="/ui", route_handlers=[ui, login, logout, asset],
                  exception_handlers={StoreDown: store_down})
