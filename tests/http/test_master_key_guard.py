"""Guessing the master key: wrong keys are counted per client address across /admin and
/ui/login, then refused with 429 whatever comes; behind a trusted proxy the client is the one
X-Forwarded-For names (and only then); a TLS-terminating proxy's X-Forwarded-Proto makes the
console cookie Secure; a master key too short to be a secret is refused at load."""

from __future__ import annotations

import pytest

from switchyard.core.config import parse_config
from switchyard.core.settings import ConfigError
from switchyard.http.admin_auth import Failures
from tests.gateway.conftest import MASTER, base_config, upstream_model

RIGHT = {"authorization": f"Bearer {MASTER}"}
WRONG = {"authorization": "Bearer sk-not-the-master-key"}


def guarded(upstream_url: str, **server: object):
    return base_config([upstream_model("v/m", upstream_url)],
                       server={"auth_max_failures": 3, "auth_failure_window": 60, **server})


async def test_wrong_keys_on_admin_and_console_lock_the_address_out(upstream, gateway_for):
    async with gateway_for(guarded(upstream.url)) as client:
        assert (await client.get("/admin/keys", headers=RIGHT)).status_code == 200
        for _ in range(2):
            assert (await client.get("/admin/keys", headers=WRONG)).status_code == 401
        r = await client.post("/ui/login", data={"master_key": "guess"})  # the third, via the console
        assert r.status_code == 401
        for path in ("/admin/keys", "/admin/teams"):
            r = await client.get(path, headers=RIGHT)  # even the right key, while locked out
            assert r.status_code == 429, r.text
            assert 1 <= int(r.headers["retry-after"]) <= 60
            assert "too many wrong master keys" in r.json()["error"]["message"]
            assert MASTER not in r.text
        r = await client.post("/ui/login", data={"master_key": MASTER})
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert "sy_console" not in r.headers.get("set-cookie", "")


async def test_behind_a_trusted_proxy_the_forwarded_client_is_counted(upstream, gateway_for):
    async with gateway_for(guarded(upstream.url, trusted_proxies=["127.0.0.0/8"])) as client:
        for _ in range(3):
            via = "203.0.113.9, 127.0.0.2"  # the client, then a second proxy of ours
            r = await client.get("/admin/keys", headers={**WRONG, "x-forwarded-for": via})
            assert r.status_code == 401
        r = await client.get("/admin/keys", headers={**RIGHT, "x-forwarded-for": "203.0.113.9"})
        assert r.status_code == 429
        # Another client behind the same proxy is not locked out with it.
        r = await client.get("/admin/keys", headers={**RIGHT, "x-forwarded-for": "198.51.100.7"})
        assert r.status_code == 200


async def test_from_anyone_else_x_forwarded_for_is_ignored(upstream, gateway_for):
    async with gateway_for(guarded(upstream.url, trusted_proxies=["10.9.9.9"])) as client:
        for i in range(3):  # a new made-up address each time: still one client, the peer
            r = await client.get("/admin/keys", headers={**WRONG, "x-forwarded-for": f"192.0.2.{i}"})
            assert r.status_code == 401
        r = await client.get("/admin/keys", headers={**RIGHT, "x-forwarded-for": "192.0.2.200"})
        assert r.status_code == 429


@pytest.mark.parametrize(("trusted", "secure"), [(["127.0.0.1"], True), ([], False)])
async def test_the_console_cookie_is_secure_behind_a_tls_terminating_proxy(upstream, gateway_for, trusted,
                                                                            secure):
    async with gateway_for(guarded(upstream.url, trusted_proxies=trusted)) as client:
        r = await client.post("/ui/login", data={"master_key": MASTER},
                              headers={"x-forwarded-proto": "https"})
        assert r.status_code == 303
        cookie = r.headers["set-cookie"]
        assert cookie.startswith("sy_console=") and ("; Secure" in cookie or "; secure" in cookie) == secure


def test_a_short_master_key_is_refused_at_load_without_echoing_it():
    with pytest.raises(ConfigError) as e:
        parse_config({"master_key": "hunter2-passwd"})
    assert "at least 16" in str(e.value) and "hunter2" not in str(e.value)
    parse_config({"master_key": "x" * 16})


def test_the_failure_window_slides():
    now = [0.0]
    f = Failures(2, 10.0, clock=lambda: now[0])
    f.failed("a")
    now[0] = 5.0
    f.failed("a")
    assert f.retry_after("a") == 5 and f.retry_after("b") is None
    now[0] = 10.5  # the first failure has left the window
    assert f.retry_after("a") is None
    f.failed("a")
    assert f.retry_after("a") == 5
    f.succeeded("a")
    assert f.retry_after("a") is None
