"""The /admin API: keys shown once, found on every replica, revoked, limited; teams; usage."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from litestar import Litestar, Router

from switchyard.core.canonical import Usage
from switchyard.core.errors import Forbidden, RateLimited
from switchyard.http.admin import admin_router
from switchyard.http.admin_auth import AdminAuth
from switchyard.http.sessions import Sessions
from switchyard.policies.base import Outcome
from switchyard.policies.factory import Policies, build_policies
from tests.policies.conftest import make_config

AUTH = {"Authorization": "Bearer master-secret-0123456"}


def admin_routes(p: Policies) -> Router:
    """The admin API as the app mounts it, over these policies."""
    return admin_router(p.registry, p.usage, AdminAuth(p.config.master_key, Sessions(p.store)))


@pytest.fixture(params=["memory", "redis"])
async def replicas(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Policies, Policies]]:
    """Two gateway replicas' policies over one store (memory: one replica, seen twice)."""
    ns = f"a{uuid.uuid4().hex[:10]}"
    if request.param == "memory":
        one = build_policies(make_config(), ns=ns, key_cache_ttl=0.05)
        yield one, one
        await one.aclose()
        return
    cfg = make_config(store={"url": request.getfixturevalue("redis_url"), "timeout": 2.0})
    a, b = build_policies(cfg, ns=ns, key_cache_ttl=0.05), build_policies(cfg, ns=ns, key_cache_ttl=0.05)
    yield a, b
    await a.aclose()
    await b.aclose()


@pytest.fixture
async def client(replicas: tuple[Policies, Policies]) -> AsyncIterator[httpx.AsyncClient]:
    # httpx's ASGI transport runs the app on this test's event loop (the store's loop).
    app = Litestar(route_handlers=[admin_routes(replicas[0])])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw") as c:
        yield c


async def test_the_master_key_guards_every_route(client):
    for method, path in [("GET", "/admin/keys"), ("POST", "/admin/keys"), ("GET", "/admin/usage"),
                         ("DELETE", "/admin/keys/alice"), ("PUT", "/admin/teams/x")]:
        r = await client.request(method, path)
        assert r.status_code == 401, path
        assert r.json()["error"]["type"] == "authentication_error"
    r = await client.get("/admin/keys", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401


async def test_no_master_key_disables_admin():
    p = build_policies(make_config(master_key=None), ns=f"a{uuid.uuid4().hex[:8]}")
    app = Litestar(route_handlers=[admin_routes(p)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw") as c:
        r = await c.get("/admin/keys", headers={"Authorization": "Bearer None"})
        assert r.status_code == 401 and "disabled" in r.json()["error"]["message"]


async def test_create_key_shown_once_found_everywhere_then_revoked(client, replicas):
    a, b = replicas
    body = {"team": "ml", "id": "dave", "models": ["local/*"]}
    r = await client.post("/admin/keys", headers=AUTH, json=body)
    assert r.status_code == 201
    created = r.json()
    raw = created.pop("key")
    assert raw.startswith("sk-sy-") and created["id"] == "dave" and created["team"] == "ml"
    listed = (await client.get("/admin/keys", headers=AUTH)).json()["data"]
    assert {k["id"] for k in listed} == {"alice", "bob", "carol", "dave"}
    one = (await client.get("/admin/keys/dave", headers=AUTH)).json()
    assert raw not in str(listed) and raw not in str(one)
    found = await b.keys.lookup(raw)  # another replica
    assert found is not None and (found.key_id, found.team) == ("dave", "ml")
    assert found.may_use("local/smol") and not found.may_use("openai/gpt-4o")
    again = await client.post("/admin/keys", headers=AUTH, json={"team": "ml", "id": "dave"})
    assert again.status_code == 400
    r = await client.delete("/admin/keys/dave", headers=AUTH)
    assert r.status_code == 200 and r.json()["revoked"] is True
    await asyncio.sleep(0.1)  # past the replicas' key cache
    assert await b.keys.lookup(raw) is None
    assert await a.keys.lookup(raw) is None


async def test_config_keys_can_be_revoked_and_limited(client, replicas):
    _, b = replicas
    body = {"limits": {"rpm": 1}, "models": ["local/smol"]}
    r = await client.patch("/admin/keys/alice", headers=AUTH, json=body)
    assert r.status_code == 200 and r.json()["limits"] == {"rpm": 1} and r.json()["source"] == "config"
    await asyncio.sleep(0.1)
    alice = await b.keys.lookup("sk-alice")
    assert alice is not None
    await b.policy.admit(alice, "local/smol", prompt_tokens=1, max_tokens=1)
    with pytest.raises(RateLimited, match="key alice: requests per minute limit 1 reached"):
        await b.policy.admit(alice, "local/smol", prompt_tokens=1, max_tokens=1)
    with pytest.raises(Forbidden):
        await b.policy.admit(alice, "openai/gpt-4o", prompt_tokens=1, max_tokens=1)
    r = await client.post("/admin/keys/alice/revoke", headers=AUTH)
    assert r.json()["revoked"] is True
    await asyncio.sleep(0.1)
    assert await b.keys.lookup("sk-alice") is None
    assert await b.keys.lookup("sk-bob") is not None


async def test_team_limits_allowlists_and_new_teams(client, replicas):
    _, b = replicas
    r = await client.put("/admin/teams/ml", headers=AUTH, json={
        "limits": {"tpm": 500}, "models": ["local/smol"], "model_limits": {"local/smol": {"rpm": 2}}})
    assert r.status_code == 200
    assert r.json()["limits"]["tpm"] == 500 and r.json()["model_limits"]["local/smol"]["rpm"] == 2
    await asyncio.sleep(0.1)
    bob = await b.keys.lookup("sk-bob")
    assert bob is not None and bob.team_limits.tpm == 500 and not bob.may_use("openai/gpt-4o")
    t = await b.policy.admit(bob, "local/smol", prompt_tokens=50, max_tokens=50)
    assert t.headers["x-ratelimit-remaining-tokens"] == "400"
    assert t.headers["x-ratelimit-limit-requests"] == "2"
    r = await client.put("/admin/teams/research", headers=AUTH, json={"limits": {"rpm": 5}})
    assert r.json()["source"] == "admin"
    r = await client.post("/admin/keys", headers=AUTH, json={"team": "research"})
    assert r.status_code == 201 and r.json()["id"].startswith("key-")
    assert (await client.post("/admin/keys", headers=AUTH, json={"team": "nope"})).status_code == 404
    teams = (await client.get("/admin/teams", headers=AUTH)).json()["data"]
    assert [t["name"] for t in teams] == ["ml", "ops", "research"]


async def test_bad_admin_input_is_a_400(client):
    r = await client.patch("/admin/keys/alice", headers=AUTH, json={"limits": {"rpm": 0}})
    assert r.status_code == 400 and "limits.rpm" in r.json()["error"]["message"]
    r = await client.patch("/admin/keys/alice", headers=AUTH, json={"models": "gpt"})
    assert r.status_code == 400
    r = await client.post("/admin/keys", headers=AUTH, content=b"{not json")
    assert r.status_code == 400
    assert (await client.get("/admin/keys/nobody", headers=AUTH)).status_code == 404
    r = await client.get("/admin/usage?group_by=colour", headers=AUTH)
    assert r.status_code == 400 and "group_by" in r.json()["error"]["message"]


async def test_usage_query_over_http(client, replicas):
    a, _ = replicas
    for raw, model, usage, status in [("sk-alice", "openai/gpt-4o", Usage(1000, 100), 200),
                                      ("sk-alice", "local/smol", Usage(10, 5), 200),
                                      ("sk-bob", "openai/gpt-4o", Usage(20, 0), 500),
                                      ("sk-carol", "local/smol", Usage(7, 7), 200)]:
        p = await a.keys.lookup(raw)
        assert p is not None
        t = await a.policy.admit(p, model, prompt_tokens=usage.prompt_tokens, max_tokens=100)
        await a.policy.settle(t, Outcome(usage, status, deployment="d", latency_ms=2))
    q = await client.get("/admin/usage", headers=AUTH, params={"group_by": "team,key"})
    body = q.json()
    assert [(r["team"], r["key"], r["requests"]) for r in body["data"]] == [
        ("ml", "alice", 2), ("ml", "bob", 1), ("ops", "carol", 1)]
    assert body["total"]["prompt_tokens"] == 1037 and body["total"]["errors"] == 1
    assert body["total"]["cost_usd"] == pytest.approx((1030 * 2.5 + 100 * 10) / 1e6 - 10 * 2.5 / 1e6)
    q = (await client.get("/admin/usage", headers=AUTH,
                          params={"team": "ml", "model": "openai/gpt-4o", "group_by": "day"})).json()
    assert len(q["data"]) == 1 and q["data"][0]["requests"] == 2 and q["data"][0]["total_tokens"] == 1120
    q = (await client.get("/admin/usage", headers=AUTH, params={"key": "carol"})).json()
    assert q["data"] == [q["total"] | {}] and q["total"]["completion_tokens"] == 7
    long_ago = {"from": "2001-01-01", "to": "2001-01-02"}
    q = (await client.get("/admin/usage", headers=AUTH, params=long_ago)).json()
    assert q["total"]["requests"] == 0
    recs = (await client.get("/admin/usage/records", headers=AUTH, params={"team": "ml", "limit": 2})).json()
    assert [(r["key_id"], r["status"]) for r in recs["data"]] == [("bob", 500), ("alice", 200)]


async def test_key_ids_and_team_names_are_checked(client):
    for body in ({"team": "ml", "id": 5}, {"team": "ml", "id": "a b"}, {"team": "ml", "id": "x\x1fy"},
                 {"team": "ml", "id": "k" * 65}, {"team": 7}):
        r = await client.post("/admin/keys", headers=AUTH, json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["param"] in ("id", "team")
    r = await client.put("/admin/teams/bad%1Fname", headers=AUTH, json={})
    assert r.status_code == 400 and r.json()["error"]["param"] == "name"


@pytest.mark.parametrize(("method", "path", "body", "unknown"), [
    ("PUT", "/admin/teams/ml", {"limits": {"rpm": 5}, "model_limit": {"local/smol": {"rpm": 1}}},
     "model_limit"),
    ("PATCH", "/admin/teams/ml", {"colour": "red"}, "colour"),
    ("POST", "/admin/keys", {"team": "ml", "id": "k-new", "limit": {"rpm": 1}}, "limit"),
    ("PATCH", "/admin/keys/alice", {"revoked": False, "expires": "2030-01-01T00:00:00Z"}, "expires"),
    ("POST", "/admin/keys/alice/rotate", {"grace": 60}, "grace"),
    ("POST", "/admin/keys/alice/revoke", {"reason": "leaked"}, "reason"),
    ("DELETE", "/admin/keys/alice", {"reason": "leaked"}, "reason"),
])
async def test_an_admin_body_with_a_field_it_does_not_know_is_a_400_naming_it(
        client, replicas, method, path, body, unknown):
    """A misspelt field (or one of a later version) was answered 200 and ignored."""
    r = await client.request(method, path, json=body, headers=AUTH)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == unknown
    assert repr(unknown) in err["message"]
    # ... and nothing was changed: the team has no stored limits, alice is live, no key was made.
    keys = (await client.get("/admin/keys", headers=AUTH)).json()["data"]
    assert {k["id"] for k in keys} == {"alice", "bob", "carol"} and not any(k["revoked"] for k in keys)
    assert (await client.get("/admin/teams/ml", headers=AUTH)).json()["limits"].get("rpm") is None
