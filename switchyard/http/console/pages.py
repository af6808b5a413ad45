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
from switchyard.http.oidc import FLOW_TTL_S, STATE_COOKIE, OidcError
from switchyard.http.sessions import COOKIE, CSRF_HEADER, csrf_ok
from switchyard.policies.factory import NOT_KEPT
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


SSO_LINK = '<p><a class="button" id="sso-link" href="/ui/oidc/login">Sign in with single sign-on</a></p>'
# Shown after a provider's callback: a page of this site moves on to /ui, so the browser sends the
# SameSite=Strict session cookie (a redirect chain that began at the provider would not).
SIGNED_IN_HTML = ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
                  '<meta http-equiv="refresh" content="0;url=/ui"><title>Signed in</title></head>'
                  '<body><p><a href="/ui">Continue to the console</a></p></body></html>')


def signin_page(message: str = "", status: int = 200, *, sso: bool = False,
                master: bool = True) -> Response[Any]:
    note = f'<p class="error" role="alert">{html.escape(message)}</p>' if message else ""
    page = SIGNIN_HTML.replace("<!--message-->", note).replace("<!--sso-->", SSO_LINK if sso else "")
    if not master:
        start, end = page.index("<!--master-->"), page.index("<!--/master-->")
        page = page[:start] + page[end:]
    return _page(page, status)


def console_pages(auth: AdminAuth, state_kept: bool = True) -> Router:
    """``state_kept``: False where the store keeps nothing across a restart (every page says so)."""
    sessions = auth.sessions
    app_html = APP_HTML.replace("<!--state-->", "" if state_kept else
                                f'<p id="state-note" class="volatile">{html.escape(NOT_KEPT)}.</p>')
    oidc = auth.oidc

    def signin(message: str = "", status: int = 200) -> Response[Any]:
        return signin_page(message, status, sso=oidc is not None, master=auth.master_key_login)

    def session_cookie(request: Request[Any, Any, Any], sid: str) -> Cookie:
        # Secure when the client came over https, also through a TLS-terminating proxy we trust.
        return Cookie(key=COOKIE, value=sid, path="/", httponly=True, samesite="strict",
                      secure=auth.proxies.scheme(request.scope) == "https", max_age=sessions.ttl_s)

    @get("/", include_in_schema=False)
    async def ui(request: Request[Any, Any, Any]) -> Response[Any]:
        if auth.master_key is None:
            return signin_page("The console is disabled: the gateway has no master_key.", 503)
        session = await sessions.get(request.cookies.get(COOKIE))
        if session is None:
            return signin()
        return _page(app_html.replace("{{csrf}}", html.escape(session.csrf)))

    @post("/login", status_code=303, include_in_schema=False)
    async def login(request: Request[Any, Any, Any]) -> Response[Any]:
        if not auth.master_key_login:
            return signin("Signing in with the master key is turned off (console.master_key_login).", 403)
        addr = auth.proxies.client(request.scope)
        wait = auth.failures.retry_after(addr)
        if wait is not None:  # guessing: refused whatever key comes, until the window moves on
            page = signin(f"Too many wrong master keys from this address; try again in {wait} s.", 429)
            page.headers["retry-after"] = str(wait)
            return page
        raw = await request.body()
        form = parse_qs(raw[:MAX_FORM_BYTES].decode("utf-8", "replace"))
        key = (form.get("master_key") or [""])[0]
        if len(raw) > MAX_FORM_BYTES or not auth.is_master_key(key):
            auth.failures.failed(addr)
            await auth.record(request, "console.sign_in_failed", "master_key", actor=NOBODY)
            await asyncio.sleep(WRONG_KEY_DELAY_S)
            return signin("Wrong master key.", 401)
        auth.failures.succeeded(addr)
        sid, _ = await sessions.create(MASTER.as_dict())
        await auth.record(request, "console.sign_in", "master_key", actor=MASTER)
        return Response("", status_code=303, headers=SECURITY_HEADERS | {"location": "/ui"},
                        cookies=[session_cookie(request, sid)])

    @get("/oidc/login", include_in_schema=False)
    async def oidc_login(request: Request[Any, Any, Any]) -> Response[Any]:
        """Off to the provider, with this browser's state in a cookie (SameSite=Lax: it must come
        back on the provider's redirect to the callback)."""
        if oidc is None:
            return signin("Single sign-on is not configured (console.oidc).", 404)
        try:
            url, state = await oidc.start(redirect_uri(request))
        except OidcError as e:
            return signin(f"Single sign-on is unavailable: {e}", 503)
        cookie = Cookie(key=STATE_COOKIE, value=state, path="/ui/oidc", httponly=True, samesite="lax",
                        secure=auth.proxies.scheme(request.scope) == "https", max_age=FLOW_TTL_S)
        return Response("", status_code=302, headers=SECURITY_HEADERS | {"location": url}, cookies=[cookie])

    @get("/oidc/callback", include_in_schema=False)
    async def oidc_callback(request: Request[Any, Any, Any]) -> Response[Any]:
        if oidc is None:
            return signin("Single sign-on is not configured (console.oidc).", 404)
        addr = auth.proxies.client(request.scope)
        wait = auth.failures.retry_after(addr)
        if wait is not None:  # refused sign-ins count with wrong master keys: no flood of entries
            page = signin(f"Too many refused sign-ins from this address; try again in {wait} s.", 429)
            page.headers["retry-after"] = str(wait)
            return page
        q = request.query_params
        gone = Cookie(key=STATE_COOKIE, value="", path="/ui/oidc", httponly=True, samesite="lax", max_age=0,
                      secure=auth.proxies.scheme(request.scope) == "https")
        try:
            if q.get("error"):
                raise OidcError(f"the provider answered {q['error'][:64]!r}")
            code, state = q.get("code"), q.get("state")
            if not code or not state or len(code) > 4096 or len(state) > 256:
                raise OidcError("the callback lacks its code or state")
            claims = await oidc.finish(code=code, state=state, cookie_state=request.cookies.get(STATE_COOKIE))
            actor = oidc.actor(claims)
        except OidcError as e:
            auth.failures.failed(addr)
            await auth.record(request, "console.sign_in_failed", "oidc", actor=NOBODY,
                              after={"reason": str(e)})
            page = signin(f"Single sign-on failed: {e}", 401)
            page.cookies.append(gone)
            return page
        sid, _ = await sessions.create(actor.as_dict())
        await auth.record(request, "console.sign_in", actor.id, actor=actor,
                          teams=sorted(actor.teams) if actor.teams is not None else None)
        return Response(SIGNED_IN_HTML, media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS,
                        cookies=[session_cookie(request, sid), gone])

    def redirect_uri(request: Request[Any, Any, Any]) -> str:
        assert oidc is not None
        if oidc.cfg.redirect_uri:
            return oidc.cfg.redirect_uri
        host = request.headers.get("host", "localhost")[:256]
        return f"{auth.proxies.scheme(request.scope)}://{host}/ui/oidc/callback"

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
        page = signin("The policy store is unavailable, so sessions cannot be checked; try again "
                           "shortly.", 503)
        page.headers["retry-after"] = "1"
        return page

    return Router(path="/ui", route_handlers=[ui, login, logout, oidc_login, oidc_callback, asset],
                  exception_handlers={StoreDown: store_down})
