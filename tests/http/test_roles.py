"""Roles on /admin: a test per role per admin route (the whole matrix), cross-team denial for
every read, and the admin API tokens that carry the roles.

Two teams, alpha and bravo, each with keys, a token and usage records; the actors are the master
key and tokens for admin, team_admin (alpha), member (alpha, user mia), viewer (every team) and
viewer (alpha). Nothing of bravo may reach an actor limited to alpha: not its name, not a byte.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, get_args

import httpx
import pytest

from switchyard.core.settings import Role
from switchyard.http.app import create_app
from switchyard.policies.keys import doc_names
from switchyard.policies.roles import ROLES, ROUTES
from tests.http.roles_world import ACTORS, CASES, MASTER, SCOPED, World, config, make_token, record
from tests.policies.ledger.conftest import database_url, pg_server_url  # noqa: F401
from tests.policies.ledger.helpers import wait_rows


def test_the_configs_role_names_are_the_tables():
    assert set(get_args(Role)) == set(ROLES)


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
        if "needs" in err["message"]:  # the role lacks the ability: the error names it
            assert err["param"] == ROUTES[route] and ROUTES[route] in err["message"], err
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
    for bad in ({"limits": 3}, {"limits": [1]}, {"models": "x"}, {"models": [1]}):
        r = await c.post("/admin/keys", headers=h, json={"team": "alpha"} | bad)
        assert r.status_code == 400 and r.json()["error"]["param"] in ("limits", "models"), r.text
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


@pytest.mark.parametrize("actor", ["master", "team_admin"])
async def test_a_key_written_reads_its_team_once(world: World, actor: str, monkeypatch) -> None:
    """The team's key policy, limits and allow-list (a team admin's key stays within them) come
    from one read of the team; the list of every team is not read; an admin's change reads none."""
    names, store, reads = doc_names(world.store.ns), world.store, []
    get_docs, members = store.get_docs, store.members

    async def counted_docs(docs: list[str]) -> Any:
        reads.extend(docs)
        return await get_docs(docs)

    async def counted_members(name: str) -> Any:
        reads.append(name)
        return await members(name)

    monkeypatch.setattr(store, "get_docs", counted_docs)
    monkeypatch.setattr(store, "members", counted_members)
    h = world.auth[actor]
    r = await world.c.post("/admin/keys", headers=h,
                           json={"team": "alpha", "id": "once", "limits": {"rpm": 5}})
    assert r.status_code == 201, r.text
    assert reads.count(names["team"] + "alpha") == 1 and names["teams"] not in reads, reads
    reads.clear()
    r = await world.c.patch("/admin/keys/once", headers=h, json={"limits": {"rpm": 6}, "expires_at": None})
    assert r.status_code == 200, r.text
    assert reads.count(names["team"] + "alpha") == (0 if actor == "master" else 1), reads


async def test_scoped_reads_from_the_ledger(database_url):  # noqa: F811
    """With a usage ledger the same narrowing holds: its SQL filters by the actor's teams and keys."""
    app = create_app(config(usage={"ledger": database_url, "interval": 0.05}))
    policies = app.gateway.policies
    await policies.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw") as c:
            tok = await make_token(c, {"role": "team_admin", "teams": ["alpha"]})
            ta = {"authorization": f"Bearer {tok}"}
            tok = await make_token(c, {"role": "member", "teams": ["alpha"], "user": "mia"})
            mem = {"authorization": f"Bearer {tok}"}
            r = await c.post("/admin/keys", headers=mem, json={"team": "alpha", "id": "mia-key"})
            assert r.status_code == 201
            for team, key in (("alpha", "alpha-cfg"), ("alpha", "mia-key"), ("bravo", "bravo-cfg")):
                policies.store.refuse_nowait(team, record(team, key))
            await wait_rows(database_url, 3)
            r = await c.get("/admin/usage?group_by=team,key", headers=ta)
            assert r.json()["source"] == "ledger"
            assert {(u["team"], u["key"]) for u in r.json()["data"]} == {("alpha", "alpha-cfg"),
                                                                          ("alpha", "mia-key")}
            recs = (await c.get("/admin/usage/records", headers=ta)).json()["data"]
            assert sorted(x["key_id"] for x in recs) == ["alpha-cfg", "mia-key"]
            recs = (await c.get("/admin/usage/records", headers=mem)).json()["data"]
            assert [x["key_id"] for x in recs] == ["mia-key"]
            lat = (await c.get("/admin/usage/latency", headers=ta)).json()
            assert lat["source"] == "ledger" and lat["samples"] == 2
            for h in (ta, mem):
                for path in ("/admin/usage?group_by=team,key,reason", "/admin/usage/records",
                             "/admin/overview?range=24h", "/admin/overview?range=1h", "/admin/usage/latency"):
                    r = await c.get(path, headers=h)
                    assert r.status_code == 200 and "bravo" not in r.text, (path, r.text)
            ov = (await c.get("/admin/overview?range=24h", headers=mem)).json()
            assert ov["total"]["refused"] == 1 and [x["key"] for x in ov["refused"]] == ["mia-key"]
    finally:
        await policies.aclose()
