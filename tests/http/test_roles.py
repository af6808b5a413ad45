"""Roles on /admin: a test per role per admin route (the whole matrix), cross-team denial for
every read, and the admin API tokens that carry the roles.

Two teams, alpha and bravo, each with keys, a token and usage records; the actors are the master
key and tokens for admin, team_admin (alpha), member (alpha, user mia), viewer (every team) and
viewer (alpha). Nothing of bravo may reach an actor limited to alpha: not its name, not a byte.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from switchyard.core.config import parse_config
from switchyard.http.app import create_app
from switchyard.policies.roles import ROLES, ROUTES
from switchyard.policies.store import UsageRecord

MASTER = {"authorization": "Bearer master-roles-0123456"}
SCOPED = ("team_admin", "member", "viewer_alpha")  # the actors limited to team alpha


def config() -> Any:
    return parse_config({
        "master_key": "master-roles-0123456",
        "models": [{"name": "openai/gpt-4o", "deployments": [{"name": "d1", "base_url": "http://127.0.0.1:9"}]},
                   {"name": "local/smol", "deployments": [{"name": "d2", "base_url": "http://127.0.0.1:9"}]}],
        "teams": [{"name": "alpha", "limits": {"rpm": 100}, "models": ["openai/gpt-4o"]}, {"name": "bravo"}],
        "keys": [{"id": "alpha-cfg", "team": "alpha", "key": "sk-alpha-cfg"},
                 {"id": "bravo-cfg", "team": "bravo", "key": "sk-bravo-cfg"}],
    })


@dataclass
class World:
    c: httpx.AsyncClient
    auth: dict[str, dict[str, str]]  # actor -> headers
    ids: dict[str, str]  # names the cases use: mia's key, bravo's token...
    store: Any


def record(team: str, key: str) -> UsageRecord:
    return UsageRecord(ts_ms=int(time.time() * 1000), key_id=key, team=team, model="openai/gpt-4o",
                       deployment="", prompt_tokens=0, completion_tokens=0, cached_tokens=0, cost_nano=0,
                       status=429, latency_ms=1.0, reason="rate_limit:rpm")


async def make_token(c: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] = MASTER) -> str:
    r = await c.post("/admin/tokens", headers=headers, json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


@pytest.fixture
async def world() -> AsyncIterator[World]:
    app = create_app(config())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw") as c:
        bearer = {
            "admin": await make_token(c, {"role": "admin"}),
            "team_admin": await make_token(c, {"role": "team_admin", "teams": ["alpha"]}),
            "member": await make_token(c, {"role": "member", "teams": ["alpha"], "user": "mia"}),
            "viewer": await make_token(c, {"role": "viewer"}),
            "viewer_alpha": await make_token(c, {"role": "viewer", "teams": ["alpha"]}),
            "bravo_admin": await make_token(c, {"role": "team_admin", "teams": ["bravo"]}),
        }
        auth = {"master": MASTER} | {k: {"authorization": f"Bearer {v}"} for k, v in bearer.items()}
        ids: dict[str, str] = {}
        r = await c.post("/admin/keys", headers=auth["member"], json={"team": "alpha", "id": "mia-key"})
        assert r.status_code == 201, r.text
        r = await c.post("/admin/keys", headers=MASTER, json={"team": "bravo", "id": "bravo-made"})
        assert r.status_code == 201, r.text
        tokens = (await c.get("/admin/tokens", headers=MASTER)).json()["data"]
        ids["bravo_token"] = next(t["id"] for t in tokens if t["teams"] == ["bravo"])
        ids["member_token"] = next(t["id"] for t in tokens if t["role"] == "member")
        store = app.state.gateway.policies.store
        for team, key in (("alpha", "alpha-cfg"), ("alpha", "mia-key"), ("bravo", "bravo-cfg")):
            store.refuse_nowait(team, record(team, key))
        yield World(c, auth, ids, store)


ACTORS = ("master", "admin", "team_admin", "member", "viewer", "viewer_alpha")
OK_ALL = dict.fromkeys(ACTORS, 200)
WRITE_KEY = {"master": 200, "admin": 200, "team_admin": 200, "member": 200, "viewer": 403,
             "viewer_alpha": 403}
ADMIN_ONLY = {"master": 200, "admin": 200, "team_admin": 403, "member": 403, "viewer": 403,
              "viewer_alpha": 403}
GLOBAL_READ = {"master": 200, "admin": 200, "team_admin": 403, "member": 403, "viewer": 200,
               "viewer_alpha": 403}

# route -> (method, path, body, actor -> status)
CASES: dict[tuple[str, str], tuple[str, str, Any, dict[str, int]]] = {
    ("GET", "/admin/me"): ("GET", "/admin/me", None, OK_ALL),
    ("POST", "/admin/keys"): ("POST", "/admin/keys", {"team": "alpha"},
                              {a: 201 if s == 200 else s for a, s in WRITE_KEY.items()}),
    ("GET", "/admin/keys"): ("GET", "/admin/keys", None, OK_ALL),
    ("GET", "/admin/keys/{key_id}"): ("GET", "/admin/keys/mia-key", None, OK_ALL),
    ("PATCH", "/admin/keys/{key_id}"): ("PATCH", "/admin/keys/mia-key", {"limits": {"rpm": 5}}, WRITE_KEY),
    ("DELETE", "/admin/keys/{key_id}"): ("DELETE", "/admin/keys/mia-key", None, WRITE_KEY),
    ("POST", "/admin/keys/{key_id}/rotate"): ("POST", "/admin/keys/mia-key/rotate", {},
                                              {a: 201 if s == 200 else s for a, s in WRITE_KEY.items()}),
    ("POST", "/admin/keys/{key_id}/revoke"): ("POST", "/admin/keys/mia-key/revoke", None, WRITE_KEY),
    ("GET", "/admin/teams"): ("GET", "/admin/teams", None, OK_ALL),
    ("GET", "/admin/teams/{name}"): ("GET", "/admin/teams/alpha", None, OK_ALL),
    ("PUT", "/admin/teams/{name}"): ("PUT", "/admin/teams/alpha", {"limits": {"rpm": 50}}, ADMIN_ONLY),
    ("PATCH", "/admin/teams/{name}"): ("PATCH", "/admin/teams/alpha", {"limits": {"rpm": 50}}, ADMIN_ONLY),
    ("PUT", "/admin/teams/{name}/key_policy"): (
        "PUT", "/admin/teams/alpha/key_policy", {"defaults": {"rpm": 10}, "max_expiry_days": 30},
        {"master": 200, "admin": 200, "team_admin": 200, "member": 403, "viewer": 403, "viewer_alpha": 403}),
    ("GET", "/admin/usage"): ("GET", "/admin/usage?team=alpha&group_by=key", None, OK_ALL),
    ("GET", "/admin/usage/records"): ("GET", "/admin/usage/records?team=alpha", None, OK_ALL),
    ("GET", "/admin/usage/latency"): ("GET", "/admin/usage/latency", None, OK_ALL),
    ("GET", "/admin/overview"): ("GET", "/admin/overview?range=24h", None, OK_ALL),
    ("GET", "/admin/deployments"): ("GET", "/admin/deployments", None, GLOBAL_READ),
    ("POST", "/admin/deployments/reset"): ("POST", "/admin/deployments/reset",
                                           {"deployment": "openai/gpt-4o/d1"}, ADMIN_ONLY),
    ("POST", "/admin/tokens"): ("POST", "/admin/tokens", {"role": "viewer", "teams": ["alpha"]},
                                {"master": 201, "admin": 201, "team_admin": 201, "member": 403, "viewer": 403,
                                 "viewer_alpha": 403}),
    ("GET", "/admin/tokens"): ("GET", "/admin/tokens", None,
                               {"master": 200, "admin": 200, "team_admin": 200, "member": 403, "viewer": 200,
                                "viewer_alpha": 200}),
    ("GET", "/admin/audit"): ("GET", "/admin/audit", None,
                              {"master": 200, "admin": 200, "team_admin": 200, "member": 403, "viewer": 200,
                               "viewer_alpha": 200}),
    ("DELETE", "/admin/tokens/{token_id}"): ("DELETE", "/admin/tokens/{member_token}", None,
                                             {"master": 200, "admin": 200, "team_admin": 200, "member": 403,
                                              "viewer": 403, "viewer_alpha": 403}),
}


def test_every_admin_route_is_in_the_matrix():
    """A route added to the roles table without a case here fails this test."""
    assert set(CASES) == set(ROUTES)
    for role in ROLES:
        assert set(ROLES[role]) <= set(ROUTES.values()), role


@pytest.mark.parametrize("route", list(CASES), ids=lambda r: f"{r[0]} {r[1]}")
@pytest.mark.parametrize("actor", ACTORS)
async def test_matrix(world: World, actor: str, route: tuple[str, str]) -> None:
    method, path, body, expect = CASES[route]
    path = path.format(**world.ids)
    r = await world.c.request(method, path, headers=world.auth[actor], json=body)
    assert r.status_code == expect[actor], (actor, route, r.text)
    if r.status_code == 403:
        err = r.json()["error"]
        assert err["type"] == "permission_error"
        assert "needs" in err["message"] or "not one of your" in err["message"], err
    if actor in SCOPED:
        assert "bravo" not in r.text, (actor, route, r.text)


# Reads aimed at bravo by actors limited to alpha: each a 403 that names only what was sent.
BRAVO_READS = [
    "/admin/keys/bravo-cfg", "/admin/keys/bravo-made", "/admin/keys/no-such-key", "/admin/teams/bravo",
    "/admin/usage?team=bravo", "/admin/usage/records?team=bravo", "/admin/usage/latency?team=bravo",
    "/admin/overview?team=bravo",
]


@pytest.mark.parametrize("path", BRAVO_READS)
@pytest.mark.parametrize("actor", SCOPED)
async def test_cross_team_reads_are_refused(world: World, actor: str, path: str) -> None:
    r = await world.c.get(path, headers=world.auth[actor])
    assert r.status_code == 403, r.text
    assert r.json()["error"]["type"] == "permission_error"
    # The same answer whether the key exists or not: nothing is learnt about bravo.
    if "/keys/" in path:
        assert r.json()["error"]["message"].endswith(("not one of your teams' keys", "not one of your keys"))


@pytest.mark.parametrize("path", ["/admin/keys", "/admin/teams", "/admin/tokens", "/admin/usage",
                                  "/admin/usage?group_by=team,key", "/admin/usage/records",
                                  "/admin/usage/latency", "/admin/overview?range=24h",
                                  "/admin/overview?range=30d", "/admin/me", "/admin/audit"])
@pytest.mark.parametrize("actor", [*SCOPED, "bravo_admin"])
async def test_unqualified_reads_hold_only_the_actors_team(world: World, actor: str, path: str) -> None:
    r = await world.c.get(path, headers=world.auth[actor])
    if r.status_code == 403:  # a member reads no tokens, no audit trail
        assert actor == "member" and path in ("/admin/tokens", "/admin/audit")
        return
    assert r.status_code == 200, r.text
    other = "alpha" if actor == "bravo_admin" else "bravo"
    assert other not in r.text, r.text


async def test_team_reads_see_their_own_team(world: World) -> None:
    """Not vacuous: what a team admin of alpha reads does hold alpha's data."""
    c, h = world.c, world.auth["team_admin"]
    keys = (await c.get("/admin/keys", headers=h)).json()["data"]
    assert {k["id"] for k in keys} == {"alpha-cfg", "mia-key"}
    recs = (await c.get("/admin/usage/records", headers=h)).json()["data"]
    assert {r["key_id"] for r in recs} == {"alpha-cfg", "mia-key"}
    usage = (await c.get("/admin/usage?group_by=team", headers=h)).json()["data"]
    assert [u["team"] for u in usage] == ["alpha"] and usage[0]["refused"] == 2
    ov = (await c.get("/admin/overview?range=24h", headers=h)).json()
    assert [t["team"] for t in ov["by_team"]] == ["alpha"] and ov["unauthenticated"] == {}
    # The master key sees both teams.
    usage = (await c.get("/admin/usage?group_by=team", headers=MASTER)).json()["data"]
    assert [u["team"] for u in usage] == ["alpha", "bravo"]


async def test_a_member_sees_only_its_own_keys_and_usage(world: World) -> None:
    c, h = world.c, world.auth["member"]
    assert [k["id"] for k in (await c.get("/admin/keys", headers=h)).json()["data"]] == ["mia-key"]
    assert (await c.get("/admin/keys/alpha-cfg", headers=h)).status_code == 403
    assert (await c.patch("/admin/keys/alpha-cfg", headers=h, json={"revoked": True})).status_code == 403
    recs = (await c.get("/admin/usage/records", headers=h)).json()["data"]
    assert [r["key_id"] for r in recs] == ["mia-key"]
    usage = (await c.get("/admin/usage?group_by=key", headers=h)).json()["data"]
    assert [u["key"] for u in usage] == ["mia-key"]
    assert (await c.get("/admin/usage?key=alpha-cfg", headers=h)).status_code == 403
    info = (await c.get("/admin/keys/mia-key", headers=h)).json()
    assert info["created_by"] == "mia" and info["team"] == "alpha"


@pytest.mark.parametrize("actor", ["team_admin", "member"])
async def test_cross_team_writes_are_refused(world: World, actor: str) -> None:
    c, h = world.c, world.auth[actor]
    for method, path, body in [("POST", "/admin/keys", {"team": "bravo"}),
                               ("PATCH", "/admin/keys/bravo-made", {"limits": {"rpm": 1}}),
                               ("DELETE", "/admin/keys/bravo-made", None),
                               ("POST", "/admin/keys/bravo-made/rotate", {}),
                               ("POST", "/admin/keys/bravo-made/revoke", None),
                               ("PUT", "/admin/teams/bravo", {"limits": {"rpm": 1}}),
                               ("POST", "/admin/tokens", {"role": "viewer", "teams": ["bravo"]}),
                               ("DELETE", f"/admin/tokens/{world.ids['bravo_token']}", None)]:
        r = await c.request(method, path, headers=h, json=body)
        assert r.status_code == 403, (method, path, r.text)
        assert "bravo-made" not in r.text or path.endswith(("bravo-made", "rotate", "revoke"))
    # Nothing changed.
    key = (await c.get("/admin/keys/bravo-made", headers=MASTER)).json()
    assert key["revoked"] is False and key["limits"] == {}
    tokens = (await c.get("/admin/tokens", headers=MASTER)).json()["data"]
    assert not next(t for t in tokens if t["id"] == world.ids["bravo_token"])["revoked"]


async def test_team_admin_keys_stay_within_the_teams_limits_and_allow_list(world: World) -> None:
    c, h = world.c, world.auth["team_admin"]
    r = await c.post("/admin/keys", headers=h, json={"team": "alpha", "limits": {"rpm": 1000}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "limits.rpm", r.text
    r = await c.post("/admin/keys", headers=h, json={"team": "alpha", "models": ["local/smol"]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "models", r.text
    r = await c.patch("/admin/keys/mia-key", headers=h, json={"limits": {"rpm": 101}})
    assert r.status_code == 400, r.text
    r = await c.post("/admin/keys", headers=h, json={"team": "alpha", "limits": {"rpm": 100},
                                                     "models": ["openai/gpt-4o"]})
    assert r.status_code == 201 and r.json()["created_by"].startswith("tok-"), r.text
    # The admin may go above (it sets the team's limits anyway).
    r = await c.post("/admin/keys", headers=MASTER, json={"team": "alpha", "limits": {"rpm": 1000}})
    assert r.status_code == 201 and r.json()["created_by"] == "master"
    # A team admin cannot make an admin token, nor one for every team.
    assert (await c.post("/admin/tokens", headers=h, json={"role": "admin"})).status_code == 403
    assert (await c.post("/admin/tokens", headers=h, json={"role": "viewer"})).status_code == 403


async def test_tokens_are_shown_once_kept_hashed_and_revocable(world: World) -> None:
    c = world.c
    r = await c.post("/admin/tokens", headers=MASTER, json={"role": "viewer", "teams": ["alpha"]})
    assert r.status_code == 201
    body = r.json()
    token, tid = body["token"], body["id"]
    assert token.startswith("sy-at-") and body["role"] == "viewer" and body["teams"] == ["alpha"]
    listed = (await c.get("/admin/tokens", headers=MASTER)).text
    assert token not in listed and token.split(".")[1] not in listed and "digest" not in listed
    assert tid in listed
    h = {"authorization": f"Bearer {token}"}
    assert (await c.get("/admin/keys", headers=h)).status_code == 200
    # A wrong secret for a real id, and a made-up token: 401.
    wrong = {"authorization": f"Bearer {token[:-4]}abcd"}
    assert (await c.get("/admin/keys", headers=wrong)).status_code == 401
    assert (await c.delete(f"/admin/tokens/{tid}", headers=MASTER)).status_code == 200
    r = await c.get("/admin/keys", headers=h)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    listed = (await c.get("/admin/tokens", headers=MASTER)).json()["data"]
    assert next(t for t in listed if t["id"] == tid)["revoked"] is True
    # The store holds the token's sha256, never the token.
    store = world.store
    docs = await store.get_docs([f"{store.ns}:atoken:{tid}"])
    assert token not in str(docs) and token.split(".")[1] not in str(docs)


async def test_an_expired_token_is_refused(world: World) -> None:
    c = world.c
    r = await c.post("/admin/tokens", headers=MASTER,
                     json={"role": "admin", "expires_at": "2001-01-01T00:00:00Z"})
    assert r.status_code == 201
    h = {"authorization": f"Bearer {r.json()['token']}"}
    assert (await c.get("/admin/keys", headers=h)).status_code == 401


@pytest.mark.parametrize("body,param", [({"role": "root"}, "role"),
                                        ({"role": "team_admin"}, "teams"),
                                        ({"role": "member", "teams": ["alpha"]}, "user"),
                                        ({"role": "viewer", "teams": "alpha"}, "teams"),
                                        ({"role": "admin", "expires_at": "soon"}, "expires_at")])
async def test_bad_token_requests_name_the_parameter(world: World, body: dict[str, Any], param: str) -> None:
    r = await world.c.post("/admin/tokens", headers=MASTER, json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


async def test_the_team_key_policy_shapes_new_keys(world: World) -> None:
    c, ta, m = world.c, world.auth["team_admin"], world.auth["member"]
    r = await c.put("/admin/teams/alpha/key_policy", headers=ta, json={"defaults": {"rpm": 1000}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "limits.rpm", r.text
    r = await c.put("/admin/teams/alpha/key_policy", headers=ta,
                    json={"defaults": {"rpm": 10}, "max_expiry_days": 30, "models": ["openai/gpt-4o"]})
    assert r.status_code == 200 and r.json()["key_policy"]["max_expiry_days"] == 30, r.text
    r = await c.post("/admin/keys", headers=m, json={"team": "alpha"})
    assert r.status_code == 201, r.text
    key = r.json()
    assert key["limits"] == {"rpm": 10} and key["models"] == ["openai/gpt-4o"] and key["created_by"] == "mia"
    expires = dt.datetime.fromisoformat(key["expires_at"].replace("Z", "+00:00"))
    assert dt.timedelta(days=29.9) < expires - dt.datetime.now(dt.UTC) <= dt.timedelta(days=30)
    r = await c.post("/admin/keys", headers=m, json={"team": "alpha", "expires_at": "2099-01-01T00:00:00Z"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "expires_at", r.text
    r = await c.post("/admin/keys", headers=m, json={"team": "alpha", "models": ["local/smol"]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "models", r.text
    # A member cannot set the policy.
    assert (await c.put("/admin/teams/alpha/key_policy", headers=m, json={})).status_code == 403
