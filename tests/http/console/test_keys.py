"""Key rotation with a grace period, expiry dates, and changes reaching every replica in a second."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid

from tests.http.console.conftest import KEY, MASTER_AUTH, complete, console_config, gateway


def _in(seconds: float) -> str:
    t = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


async def _until(pred, timeout: float) -> float:
    """Seconds until ``pred()`` (async) holds; fails at ``timeout`` (a deadline, not a measurement)."""
    t0 = time.monotonic()
    while not await pred():
        assert time.monotonic() - t0 < timeout, f"not within {timeout} s"
        await asyncio.sleep(0.02)
    return time.monotonic() - t0


async def test_rotation_keeps_the_old_key_for_its_grace_period_only(upstream):
    async with gateway(console_config(upstream.url)) as c:
        made = (await c.post("/admin/keys", headers=MASTER_AUTH, json={"team": "ml", "id": "svc"})).json()
        old = made["key"]
        assert (await complete(c, old)).status_code == 200
        r = await c.post("/admin/keys/svc/rotate", headers=MASTER_AUTH, json={"grace_seconds": 2})
        assert r.status_code == 201
        new = r.json()["key"]
        assert new != old and new.startswith("sk-sy-") and r.json()["id"] == "svc"
        assert r.json()["previous_valid_until"] is not None
        assert (await complete(c, new)).status_code == 200
        assert (await complete(c, old)).status_code == 200  # in its grace period
        info = (await c.get("/admin/keys/svc", headers=MASTER_AUTH)).json()
        assert new not in str(info) and old not in str(info)

        async def old_refused() -> bool:
            return (await complete(c, old)).status_code == 401

        waited = await _until(old_refused, 5)
        assert waited > 1.0  # not before the grace period ran out
        assert (await complete(c, new)).status_code == 200

        # no grace: the old secret stops at once; limits and the team carry over
        await c.patch("/admin/keys/svc", headers=MASTER_AUTH, json={"models": ["openai/gpt-4o"]})
        r = await c.post("/admin/keys/svc/rotate", headers=MASTER_AUTH, json={})
        newer = r.json()["key"]
        assert r.json()["models"] == ["openai/gpt-4o"] and r.json()["team"] == "ml"
        assert (await complete(c, new)).status_code == 401
        assert (await complete(c, newer)).status_code == 200


async def test_revoking_a_rotated_key_revokes_the_old_secret_too(upstream):
    async with gateway(console_config(upstream.url)) as c:
        old = (await c.post("/admin/keys", headers=MASTER_AUTH, json={"team": "ml", "id": "r"})).json()["key"]
        r = await c.post("/admin/keys/r/rotate", headers=MASTER_AUTH, json={"grace_seconds": 600})
        new = r.json()["key"]
        assert (await complete(c, old)).status_code == 200
        assert (await c.post("/admin/keys/r/revoke", headers=MASTER_AUTH)).json()["revoked"] is True
        assert (await complete(c, old)).status_code == 401
        assert (await complete(c, new)).status_code == 401


async def test_revoking_a_key_rotated_twice_revokes_every_old_secret(upstream):
    async with gateway(console_config(upstream.url)) as c:
        made = await c.post("/admin/keys", headers=MASTER_AUTH, json={"team": "ml", "id": "r2"})
        secrets = [made.json()["key"]]
        for _ in range(2):
            r = await c.post("/admin/keys/r2/rotate", headers=MASTER_AUTH, json={"grace_seconds": 600})
            secrets.append(r.json()["key"])
        assert [(await complete(c, k)).status_code for k in secrets] == [200, 200, 200]  # all in grace
        assert (await c.post("/admin/keys/r2/revoke", headers=MASTER_AUTH)).json()["revoked"] is True
        assert [(await complete(c, k)).status_code for k in secrets] == [401, 401, 401]


async def test_rotation_refusals_name_the_parameter(upstream):
    async with gateway(console_config(upstream.url)) as c:
        await c.post("/admin/keys", headers=MASTER_AUTH, json={"team": "ml", "id": "x"})
        for body in ({"grace_seconds": -1}, {"grace_seconds": "60"}, {"grace_seconds": 10**9},
                     {"grace_seconds": True}):
            r = await c.post("/admin/keys/x/rotate", headers=MASTER_AUTH, json=body)
            assert r.status_code == 400 and r.json()["error"]["param"] == "grace_seconds", body
        r = await c.post("/admin/keys/alice/rotate", headers=MASTER_AUTH, json={})
        assert r.status_code == 400 and "config" in r.json()["error"]["message"]
        assert (await c.post("/admin/keys/ghost/rotate", headers=MASTER_AUTH, json={})).status_code == 404


async def test_expires_at_is_enforced_at_auth(upstream):
    async with gateway(console_config(upstream.url)) as c:
        body = {"team": "ml", "id": "tmp", "expires_at": _in(2)}
        r = await c.post("/admin/keys", headers=MASTER_AUTH, json=body)
        assert r.status_code == 201 and r.json()["expires_at"].endswith("Z")
        raw = r.json()["key"]
        assert (await complete(c, raw)).status_code == 200

        async def refused() -> bool:
            return (await complete(c, raw)).status_code == 401

        assert await _until(refused, 5) > 0.5
        # lifting the expiry brings it back; a config key can be given one too
        r = await c.patch("/admin/keys/tmp", headers=MASTER_AUTH, json={"expires_at": None})
        assert r.json()["expires_at"] is None
        assert (await complete(c, raw)).status_code == 200
        await c.patch("/admin/keys/alice", headers=MASTER_AUTH, json={"expires_at": _in(-60)})
        assert (await complete(c, KEY)).status_code == 401
        for bad in ("tomorrow", "2027-01-01T00:00:00", 12345):
            r = await c.patch("/admin/keys/tmp", headers=MASTER_AUTH, json={"expires_at": bad})
            assert r.status_code == 400 and r.json()["error"]["param"] == "expires_at", bad


async def test_key_changes_reach_another_replica_within_a_second(upstream, redis_url):
    """Two gateways on one Redis, each with the default key cache: a change made on one is in
    force on the other within a second; a console session made on one works on the other."""
    ns_store = redis_url
    config = console_config(upstream.url, store=ns_store)
    tag = uuid.uuid4().hex[:6]
    async with gateway(config) as a, gateway(config) as b:
        made = (await a.post("/admin/keys", headers=MASTER_AUTH, json={"team": "ml", "id": f"k{tag}"})).json()
        raw = made["key"]
        assert (await complete(b, raw)).status_code == 200  # a new key: never cached as unknown on b

        t0 = time.monotonic()
        await a.post(f"/admin/keys/k{tag}/revoke", headers=MASTER_AUTH)

        async def refused_on_b() -> bool:
            return (await complete(b, raw)).status_code == 401

        await _until(refused_on_b, 3)
        assert time.monotonic() - t0 <= 1.5  # within the 1 s key cache (+ the requests' own time)

        new = (await a.post("/admin/keys", headers=MASTER_AUTH, json={"team": "ml", "id": f"r{tag}"})).json()
        assert (await complete(b, new["key"])).status_code == 200
        t0 = time.monotonic()
        rotated = (await a.post(f"/admin/keys/r{tag}/rotate", headers=MASTER_AUTH, json={})).json()["key"]
        assert (await complete(b, rotated)).status_code == 200

        async def old_refused_on_b() -> bool:
            return (await complete(b, new["key"])).status_code == 401

        await _until(old_refused_on_b, 3)
        assert time.monotonic() - t0 <= 1.5

        r = await a.post("/ui/login", data={"master_key": MASTER_AUTH["authorization"][7:]})
        b.cookies.set("sy_console", a.cookies["sy_console"])
        assert r.status_code == 303 and (await b.get("/admin/keys")).status_code == 200
