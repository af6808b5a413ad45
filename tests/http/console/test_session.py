"""Signing in to the console: the session cookie, CSRF, the CSP, a wrong master key."""

from __future__ import annotations

import time

import httpx
from litestar import Litestar

from switchyard.http.admin_auth import AdminAuth
from switchyard.http.console.pages import CSP
from switchyard.http.sessions import Sessions
from switchyard.policies.factory import build_policies
from tests.http.console.conftest import MASTER, MASTER_AUTH, console_config, gateway, sign_in


async def test_signed_out_ui_is_the_signin_page_with_a_strict_csp(upstream):
    async with gateway(console_config(upstream.url)) as c:
        r = await c.get("/ui")
        assert r.status_code == 200 and 'action="/ui/login"' in r.text
        assert "csrf-token" not in r.text and "Overview" not in r.text
        assert r.headers["content-security-policy"] == CSP
        for directive in ("default-src 'none'", "script-src 'self'", "frame-ancestors 'none'",
                          "form-action 'self'"):
            assert directive in r.headers["content-security-policy"]
        assert "unsafe-inline" not in CSP and "unsafe-eval" not in CSP
        assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
        js = await c.get("/ui/static/app.js")
        assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
        assert js.headers["content-security-policy"] == CSP
        assert (await c.get("/ui/static/..%2Fpages.py")).status_code == 404
        assert (await c.get("/ui/static/nope.js")).status_code == 404
        assert (await c.get("/admin/keys")).status_code == 401


async def test_a_wrong_master_key_gets_the_signin_page_again_after_a_delay(upstream):
    async with gateway(console_config(upstream.url)) as c:
        t0 = time.monotonic()
        r = await c.post("/ui/login", data={"master_key": MASTER + "x"})
        took = time.monotonic() - t0
        assert r.status_code == 401 and "Wrong master key" in r.text and 'action="/ui/login"' in r.text
        assert took >= 0.45  # the fixed delay (a floor, not a speed measurement)
        assert "set-cookie" not in r.headers and not c.cookies
        assert "csrf-token" not in r.text
        r = await c.post("/ui/login", data={"master_key": ""})
        assert r.status_code == 401
        assert (await c.get("/admin/keys")).status_code == 401


async def test_signin_sets_a_hardened_cookie_and_only_its_hash_is_stored(upstream):
    config = console_config(upstream.url)
    async with gateway(config) as c:
        r = await c.post("/ui/login", data={"master_key": MASTER})
        assert r.status_code == 303
        cookie = r.headers["set-cookie"]
        attrs = {a.strip().split("=")[0].lower() for a in cookie.split(";")}
        assert {"httponly", "path", "max-age", "samesite"} <= attrs and "secure" not in attrs  # plain http
        assert "samesite=strict" in cookie.lower() and "max-age=28800" in cookie.lower()
        sid = c.cookies["sy_console"]
        page = (await c.get("/ui")).text
        assert "csrf-token" in page and MASTER not in page
        store = c.app.state.gateway.policies.store  # type: ignore[attr-defined]
        docs = store._docs  # the test looks inside memory:// on purpose: what exactly is kept
        assert not any(sid in name or sid in str(doc) for name, doc in docs.items())
        assert any(":session:" in name for name in docs)


async def test_the_cookie_is_secure_over_https():
    p = build_policies(console_config("http://127.0.0.1:9"))
    from switchyard.http.console.pages import console_pages
    app = Litestar(route_handlers=[console_pages(AdminAuth(p.config.master_key, Sessions(p.store)))])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="https://gw") as c:
        r = await c.post("/ui/login", data={"master_key": MASTER})
        assert r.status_code == 303 and "secure" in r.headers["set-cookie"].lower()


async def test_session_calls_the_admin_api_and_state_changes_need_the_csrf_token(upstream):
    async with gateway(console_config(upstream.url)) as c:
        csrf = await sign_in(c)
        r = await c.get("/admin/keys")
        assert r.status_code == 200 and [k["id"] for k in r.json()["data"]] == ["alice"]
        body = {"team": "ml", "id": "new"}
        r = await c.post("/admin/keys", json=body)
        assert r.status_code == 403 and "x-csrf-token" in r.json()["error"]["message"]
        r = await c.post("/admin/keys", json=body, headers={"x-csrf-token": csrf + "x"})
        assert r.status_code == 403
        for method, path in [("PATCH", "/admin/keys/alice"), ("DELETE", "/admin/keys/alice"),
                             ("PUT", "/admin/teams/ml"), ("POST", "/admin/keys/alice/revoke")]:
            assert (await c.request(method, path, json={})).status_code == 403, path
        assert (await c.get("/admin/keys/alice")).json()["revoked"] is False
        r = await c.post("/admin/keys", json=body, headers={"x-csrf-token": csrf})
        assert r.status_code == 201 and r.json()["key"].startswith("sk-sy-")
        # a wrong Authorization header is not rescued by a good cookie
        assert (await c.get("/admin/keys", headers={"authorization": "Bearer nope"})).status_code == 401
        # the same call a script makes, with the master key and no cookie
        async with httpx.AsyncClient(base_url=str(c.base_url)) as script:
            r = await script.get("/admin/keys/new", headers=MASTER_AUTH)
            assert r.status_code == 200 and r.json()["team"] == "ml"


async def test_sign_out_ends_the_session_everywhere(upstream):
    async with gateway(console_config(upstream.url)) as c:
        csrf = await sign_in(c)
        sid = c.cookies["sy_console"]
        assert (await c.post("/ui/logout")).status_code == 403  # no CSRF token: not signed out
        assert (await c.get("/admin/keys")).status_code == 200
        r = await c.post("/ui/logout", headers={"x-csrf-token": csrf})
        assert r.status_code == 303
        c.cookies.set("sy_console", sid)  # a copy of the old cookie is worthless now
        assert (await c.get("/admin/keys")).status_code == 401
        assert 'action="/ui/login"' in (await c.get("/ui")).text


async def test_sessions_expire():
    p = build_policies(console_config("http://127.0.0.1:9"))
    s = Sessions(p.store, ttl_s=1)
    sid, made = await s.create()
    assert await s.get(sid) == made
    time.sleep(1.05)
    assert await s.get(sid) is None
    assert await s.get("") is None and await s.get("x" * 500) is None


async def test_the_store_down_is_a_503_page_not_a_500(upstream):
    config = console_config(upstream.url, store="redis://127.0.0.1:9/0")  # nothing listens there
    async with gateway(config) as c:
        c.cookies.set("sy_console", "whatever")
        r = await c.get("/ui")
        assert r.status_code == 503 and "policy store is unavailable" in r.text
        assert r.headers["content-security-policy"] == CSP
        r = await c.post("/ui/login", data={"master_key": MASTER})
        assert r.status_code == 503 and "set-cookie" not in r.headers
        r = await c.get("/admin/keys")
        assert r.status_code == 503 and r.json()["error"]["type"] == "service_unavailable"
