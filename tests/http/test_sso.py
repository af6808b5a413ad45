"""Single sign-on against a real OpenID provider (``oidc-provider`` on loopback,
``tests/fakes/oidc.py``): the sign-in flow in headless Chromium (redirect, the provider's login
form, callback, session, sign-out); ID tokens refused when expired, forged, for another audience
or issuer, with ``alg: none`` or an HMAC, or with a replayed or wrong nonce; a state mismatch; a
rotated key picked up; the provider's access tokens as Bearer on /admin; the break-glass master
key sign-in turned off."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import jwt
import pytest
from playwright.async_api import expect

from switchyard.core.config import Config, parse_config
from switchyard.core.settings import OidcConfig
from switchyard.http.oidc import Oidc, OidcError
from switchyard.policies.memory import MemoryStore
from tests.conftest import free_port
from tests.fakes.oidc import CLIENT_ID, CLIENT_SECRET, Key, Provider, oidc_provider
from tests.http.console.conftest import gateway
from tests.http.console.test_browser import browser  # noqa: F401 -- headless Debian chromium

MASTER = "sk-master-sso-0123456"
ROLES = [{"claim": "groups", "value": "platform-admins", "role": "admin"},
         {"claim": "groups", "value": "alpha-leads", "role": "team_admin", "teams": ["alpha"]},
         {"claim": "groups", "value": "alpha-devs", "role": "member", "teams": ["alpha"]},
         {"claim": "groups", "value": "auditors", "role": "viewer"}]


def oidc_cfg(issuer: str, **extra: Any) -> dict[str, Any]:
    return {"issuer": issuer, "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
            "scopes": ["openid", "email", "profile", "groups"], "roles": ROLES} | extra


def config(issuer: str, **console: Any) -> Config:
    return parse_config({
        "master_key": MASTER,
        "models": [{"name": "openai/gpt-4o", "deployments": [{"name": "d1", "base_url": "http://127.0.0.1:9"}]}],
        "teams": [{"name": "alpha"}, {"name": "bravo"}],
        "keys": [{"id": "alpha-cfg", "team": "alpha", "key": "sk-sso-alpha"},
                 {"id": "bravo-cfg", "team": "bravo", "key": "sk-sso-bravo"}],
        "console": {"oidc": oidc_cfg(issuer)} | console,
    })


@pytest.fixture
async def provider() -> AsyncIterator[Provider]:
    async with oidc_provider("http://127.0.0.1:9/ui/oidc/callback") as p:
        yield p


@pytest.fixture
async def oidc(provider: Provider) -> AsyncIterator[Oidc]:
    o = Oidc(OidcConfig.model_validate(oidc_cfg(provider.issuer)), MemoryStore(ns="t"))
    yield o
    await o.aclose()


async def test_sign_in_through_the_provider_in_chromium(browser):  # noqa: F811
    """A team lead signs in at the provider, sees only its team, and signs out."""
    pport = free_port()
    async with gateway(config(f"http://127.0.0.1:{pport}")) as c:
        base = str(c.base_url).rstrip("/")
        async with oidc_provider(f"{base}/ui/oidc/callback", port=pport):
            page = await browser.new_page()
            await sign_in(page, base, pport, "tom")
            # The console follows the role: tom's name and role, his team's pages only.
            await expect(page.locator("#whoami")).to_have_text("Tom Lead · team admin (alpha)")
            assert await page.locator("nav a").evaluate_all("as => as.map(a => a.dataset.page)") == \
                ["overview", "keys", "usage", "audit"]
            await expect(page.locator("body")).to_have_attribute("data-loaded", "overview")
            assert "bravo" not in await page.locator("main").inner_text()
            await page.click('nav a[data-page="keys"]')
            await expect(page.locator("body")).to_have_attribute("data-loaded", "keys")
            await expect(page.locator("#team-form")).to_be_hidden()
            await expect(page.locator("#key-form")).to_be_visible()
            assert "bravo" not in await page.locator("main").inner_text()
            # The team lead sets the team's key policy in the console.
            await page.select_option("#policy-team", "alpha")
            await page.fill("#policy-form input[name=rpm]", "10")
            await page.fill("#policy-form input[name=max_expiry_days]", "30")
            await page.click("#save-policy")
            await expect(page.locator('[data-policy="alpha"]')).to_have_text(
                "defaults rpm 10; expiry at most 30 days")
            me = await page.evaluate("fetch('/admin/me').then(r => r.json())")
            assert (me["id"], me["role"], me["teams"], me["email"], me["name"]) == \
                ("tom", "team_admin", ["alpha"], "tom@example.com", "Tom Lead")
            keys = await page.evaluate("fetch('/admin/keys').then(r => r.text())")
            assert "alpha-cfg" in keys and "bravo" not in keys
            cookies = {ck["name"]: ck for ck in await page.context.cookies()}
            session = cookies["sy_console"]
            assert session["httpOnly"] and session["sameSite"] == "Strict"
            await page.click("#signout")
            await expect(page.locator("#sso-link")).to_be_visible()
            status = await page.evaluate("fetch('/admin/me').then(r => r.status)")
            assert status == 401
            r = await c.get("/admin/audit", headers={"authorization": f"Bearer {MASTER}"})
            audit = r.json()["data"]
            assert [(e["action"], e["actor"], e["role"]) for e in audit[:3]] == \
                [("console.sign_out", "tom", "team_admin"), ("team.key_policy", "tom", "team_admin"),
                 ("console.sign_in", "tom", "team_admin")]
            assert audit[2]["email"] == "tom@example.com"


async def sign_in(page: Any, base: str, pport: int, login: str) -> None:
    """Through the provider's own pages: its login form (any password), then its consent."""
    await page.goto(f"{base}/ui")
    await page.click("#sso-link")
    await expect(page.locator("input[name=login]")).to_be_visible()
    assert page.url.startswith(f"http://127.0.0.1:{pport}/")
    await page.fill("input[name=login]", login)
    await page.fill("input[name=password]", "anything")
    await page.click("button[type=submit]")
    await page.click("button[type=submit]")  # the provider's consent: Continue
    await page.wait_for_url(f"{base}/ui")
    await expect(page.locator("#signout")).to_be_visible()


async def test_a_member_creates_its_own_key_in_the_console(browser):  # noqa: F811
    pport = free_port()
    async with gateway(config(f"http://127.0.0.1:{pport}")) as c:
        base = str(c.base_url).rstrip("/")
        async with oidc_provider(f"{base}/ui/oidc/callback", port=pport):
            page = await browser.new_page()
            await sign_in(page, base, pport, "mia")
            await expect(page.locator("#whoami")).to_have_text("Mia Member · member (alpha)")
            assert await page.locator("nav a").evaluate_all("as => as.map(a => a.dataset.page)") == \
                ["overview", "keys", "usage"]
            await page.click('nav a[data-page="keys"]')
            await expect(page.locator("body")).to_have_attribute("data-loaded", "keys")
            await expect(page.locator("#policy-form")).to_be_hidden()
            await page.select_option("#key-form select[name=team]", "alpha")
            await page.fill("#key-form input[name=id]", "mias-key")
            await page.click("#create-key")
            await expect(page.locator("#new-key")).to_contain_text("sk-sy-")
            master = {"authorization": f"Bearer {MASTER}"}
            key = (await c.get("/admin/keys/mias-key", headers=master)).json()
            assert key["created_by"] == "mia" and key["team"] == "alpha"
            # Her keys page lists her key only, not the team's config key.
            await page.click("#new-key-done")
            text = await page.locator("#page-keys").inner_text()
            assert "mias-key" in text and "alpha-cfg" not in text


async def test_a_state_that_is_not_this_browsers_is_refused(provider: Provider) -> None:
    async with gateway(config(provider.issuer)) as c:
        r = await c.get("/ui/oidc/login")
        assert r.status_code == 302 and r.headers["location"].startswith(f"{provider.issuer}/auth?")
        assert "code_challenge_method=S256" in r.headers["location"]
        assert "nonce=" in r.headers["location"]
        set_cookie = r.headers["set-cookie"]
        assert "HttpOnly" in set_cookie and "SameSite=lax" in set_cookie.replace("Lax", "lax")
        r = await c.get("/ui/oidc/callback", params={"code": "x", "state": "not-the-one"})
        assert r.status_code == 401 and "state does not match" in r.text
        assert "sy_console" not in r.headers.get("set-cookie", "")
        audit = (await c.get("/admin/audit", headers={"authorization": f"Bearer {MASTER}"})).json()["data"]
        assert audit[0]["action"] == "console.sign_in_failed" and "state" in audit[0]["after"]["reason"]
        # Refused callbacks count as failed sign-ins: the address is stopped before it floods the trail.
        codes = [(await c.get("/ui/oidc/callback", params={"code": "x", "state": "s"})).status_code
                 for _ in range(12)]
        assert codes == [401] * 10 + [429] * 2  # (the master key's read above cleared the count)
        store = c.app.gateway.policies.store  # type: ignore[attr-defined]  # the address is stopped now
        entries = await store.audit_read(None, 100)
        assert [e["action"] for e in entries] == ["console.sign_in_failed"] * 11  # none once stopped


async def test_a_valid_id_token_passes(oidc: Oidc, provider: Provider) -> None:
    claims = await oidc.verify(provider.token(nonce="n-1"), audience=CLIENT_ID, nonce="n-1")
    assert claims["sub"] == "ada"
    actor = oidc.actor(claims)
    assert (actor.role, actor.teams, actor.email) == ("admin", None, "ada@example.com")


@pytest.mark.parametrize("case,why", [
    ("expired", "expired"), ("forged", "not valid"), ("audience", "another audience"),
    ("issuer", "another issuer"), ("none", "not allowed"), ("hmac", "not allowed"),
    ("nonce", "nonce is not"), ("unknown-kid", "does not publish"),
])
async def test_bad_id_tokens_are_refused(oidc: Oidc, provider: Provider, case: str, why: str) -> None:
    now = int(time.time())
    claims = {"iss": provider.issuer, "aud": CLIENT_ID, "sub": "ada", "iat": now, "exp": now + 300,
              "nonce": "n-1"}
    token = {
        "expired": lambda: provider.token(nonce="n-1", ttl=-120),
        "forged": lambda: Key(provider.key.kid, Key.new("x").private).sign(claims),
        "audience": lambda: provider.token(nonce="n-1", aud="someone-else"),
        "issuer": lambda: provider.key.sign(claims | {"iss": "http://127.0.0.1:1"}),
        "none": lambda: jwt.encode(claims, None, algorithm="none", headers={"kid": provider.key.kid}),
        "hmac": lambda: jwt.encode(claims, "a-shared-secret-of-thirty-two-bytes!", algorithm="HS256",
                                   headers={"kid": provider.key.kid}),
        "nonce": lambda: provider.token(nonce="n-2"),
        "unknown-kid": lambda: Key.new("never-published").sign(claims),
    }[case]()
    oidc.refetch_s = 0
    with pytest.raises(OidcError, match=why):
        await oidc.verify(token, audience=CLIENT_ID, nonce="n-1")


async def test_a_replayed_nonce_is_refused(oidc: Oidc, provider: Provider) -> None:
    token = provider.token(nonce="n-once")
    await oidc.verify(token, audience=CLIENT_ID, nonce="n-once")
    with pytest.raises(OidcError, match="used before"):
        await oidc.verify(token, audience=CLIENT_ID, nonce="n-once")


async def test_a_rotated_key_is_picked_up() -> None:
    port = free_port()
    async with oidc_provider("http://127.0.0.1:9/cb", port=port) as old:
        o = Oidc(OidcConfig.model_validate(oidc_cfg(old.issuer)), MemoryStore(ns="t"))
        await o.verify(old.token(), audience=CLIENT_ID)
    o.refetch_s = 0  # the test does not wait the ten seconds between refetches
    async with oidc_provider("http://127.0.0.1:9/cb", port=port, key=Key.new("rotated")) as new:
        assert new.key.kid != old.key.kid
        claims = await o.verify(new.token(sub="vic"), audience=CLIENT_ID)
        assert claims["sub"] == "vic"
        with pytest.raises(OidcError, match="does not publish"):  # the old key is gone
            await o.verify(old.token(), audience=CLIENT_ID)
    await o.aclose()


def test_claims_map_to_roles_and_teams(oidc: Oidc, provider: Provider) -> None:
    got = {u: oidc.actor({"sub": u, "groups": g}) for u, g in
           [("tom", ["alpha-leads"]), ("mia", ["alpha-devs"]), ("vic", ["auditors"]),
            ("two", ["alpha-devs", "platform-admins"])]}
    assert (got["tom"].role, got["tom"].teams) == ("team_admin", frozenset({"alpha"}))
    assert (got["mia"].role, got["mia"].teams, got["mia"].user) == ("member", frozenset({"alpha"}), "mia")
    assert (got["vic"].role, got["vic"].teams) == ("viewer", None)
    assert got["two"].role == "admin"  # the first rule that matches gives the role
    with pytest.raises(OidcError, match="no role"):
        oidc.actor({"sub": "nob", "groups": ["nothing"]})


async def test_access_tokens_are_accepted_on_admin(provider: Provider) -> None:
    async with gateway(config(provider.issuer)) as c:
        def bearer(token: str) -> dict[str, str]:
            return {"authorization": f"Bearer {token}"}

        r = await c.get("/admin/keys", headers=bearer(provider.token(sub="tom")))
        assert r.status_code == 200 and [k["id"] for k in r.json()["data"]] == ["alpha-cfg"]
        r = await c.get("/admin/teams/bravo", headers=bearer(provider.token(sub="tom")))
        assert r.status_code == 403
        r = await c.put("/admin/teams/alpha", headers=bearer(provider.token(sub="ada")),
                        json={"limits": {"rpm": 9}})
        assert r.status_code == 200
        for bad in (provider.token(sub="tom", aud="other"), provider.token(sub="tom", ttl=-120),
                    jwt.encode({"iss": provider.issuer, "aud": CLIENT_ID, "sub": "ada", "exp": 2**40,
                                "iat": 0}, None, algorithm="none")):
            r = await c.get("/admin/keys", headers=bearer(bad))
            assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error", r.text
        r = await c.get("/admin/keys", headers=bearer(provider.token(sub="nob")))
        assert r.status_code == 401 and "no role" in r.json()["error"]["message"]


async def test_the_master_key_sign_in_can_be_turned_off(provider: Provider) -> None:
    async with gateway(config(provider.issuer, master_key_login=False)) as c:
        page = await c.get("/ui")
        assert 'id="sso-link"' in page.text and 'name="master_key"' not in page.text
        r = await c.post("/ui/login", data={"master_key": MASTER})
        assert r.status_code == 403 and "sy_console" not in r.headers.get("set-cookie", "")
        # The admin API still takes the key (scripts; the console's break glass is what is off).
        assert (await c.get("/admin/keys", headers={"authorization": f"Bearer {MASTER}"})).status_code == 200
    async with gateway(config(provider.issuer)) as c:
        page = await c.get("/ui")
        assert 'id="sso-link"' in page.text and 'name="master_key"' in page.text


async def test_only_asymmetric_algorithms_may_be_configured() -> None:
    for algs in (["none"], ["HS256"], []):
        with pytest.raises(ValueError, match="asymmetric"):
            OidcConfig.model_validate(oidc_cfg("http://x", algorithms=algs))


def test_without_single_sign_on_pyjwt_is_not_loaded() -> None:
    """PyJWT and cryptography (~15 MiB of memory) are imported only where console.oidc is set."""
    code = ("import sys, switchyard.http.app; from switchyard.http.app import create_app; "
            "from tests.http.roles_world import config; create_app(config()); "
            "print(sorted(m for m in ('jwt', 'cryptography') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr[-2000:]
