"""The audit trail: every state-changing /admin route leaves exactly one entry with its actor, no
secret in any; sign-ins, failed sign-ins and sign-outs too; GET is the only method on
/admin/audit; filters and cursor pages; in PostgreSQL (append-only) when the ledger is set."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from switchyard.core.config import parse_config
from switchyard.http.app import create_app
from switchyard.policies.factory import build_policies
from switchyard.policies.roles import ROUTES
from tests.http.roles_world import CASES, MASTER, World, config
from tests.policies.ledger.conftest import database_url, pg_server_url  # noqa: F401

CHANGES = [r for r in ROUTES if r[0] != "GET"]
ACTIONS = {
    ("POST", "/admin/keys"): "key.create", ("PATCH", "/admin/keys/{key_id}"): "key.update",
    ("DELETE", "/admin/keys/{key_id}"): "key.revoke", ("POST", "/admin/keys/{key_id}/rotate"): "key.rotate",
    ("POST", "/admin/keys/{key_id}/revoke"): "key.revoke", ("PUT", "/admin/teams/{name}"): "team.update",
    ("PATCH", "/admin/teams/{name}"): "team.update",
    ("PUT", "/admin/teams/{name}/key_policy"): "team.key_policy",
    ("POST", "/admin/deployments/reset"): "deployment.reset", ("POST", "/admin/tokens"): "token.create",
    ("DELETE", "/admin/tokens/{token_id}"): "token.revoke",
}


async def entries(c: httpx.AsyncClient, **q: str) -> list[dict[str, Any]]:
    r = await c.get("/admin/audit", headers=MASTER, params=q | {"limit": "1000"})
    assert r.status_code == 200, r.text
    return list(r.json()["data"])


def test_every_change_has_an_action():
    assert set(ACTIONS) == set(CHANGES)


# Each change by each actor whose role allows it (the matrix test covers the refusals).
ALLOWED = [(a, r) for a in ("master", "admin", "team_admin", "member") for r in CHANGES
           if CASES[r][3][a] != 403]


@pytest.mark.parametrize("actor,route", ALLOWED, ids=lambda v: v if isinstance(v, str) else f"{v[0]} {v[1]}")
async def test_every_change_leaves_exactly_one_entry(world: World, actor: str,
                                                     route: tuple[str, str]) -> None:
    method, path, body, _ = CASES[route]
    c = world.c
    before = await entries(c)
    r = await c.request(method, path.format(**world.ids), json=body,
                        headers=world.auth[actor] | {"x-request-id": "audit-req-1"})
    assert r.status_code in (200, 201), r.text
    after = await entries(c)
    assert len(after) == len(before) + 1, [e["action"] for e in after[: len(after) - len(before)]]
    e = after[0]
    assert set(e) >= {"at", "actor", "role", "action", "target", "before", "after", "client", "request_id"}
    assert e["action"] == ACTIONS[route]
    token_id = world.auth[actor]["authorization"].removeprefix("Bearer sy-at-").split(".")[0]
    assert e["actor"] == ("master" if actor == "master" else token_id)
    assert e["role"] == ("admin" if actor == "master" else actor)
    assert e["request_id"] == "audit-req-1" and e["client"] == "127.0.0.1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["at"])
    # Never a secret: not the key or token the answer showed once, not the caller's own.
    text = str(e)
    for secret in (r.json().get("key"), r.json().get("token"), world.auth[actor]["authorization"][7:]):
        if secret:
            assert secret not in text
    assert "sk-" not in text and "sy-at-" not in text and "digest" not in text


async def test_refused_changes_leave_no_entry(world: World) -> None:
    c = world.c
    before = await entries(c)
    r = await c.put("/admin/teams/alpha", headers=world.auth["team_admin"], json={})
    assert r.status_code == 403
    r = await c.post("/admin/keys", headers=MASTER, json={"team": "alpha", "limits": 3})
    assert r.status_code == 400
    assert len(await entries(c)) == len(before)


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
async def test_no_method_but_get_on_the_audit_trail(world: World, method: str) -> None:
    r = await world.c.request(method, "/admin/audit", headers=MASTER, json={})
    assert r.status_code == 405, r.text
    r = await world.c.request(method, "/admin/audit/000000000000001-000000", headers=MASTER, json={})
    assert r.status_code in (404, 405), r.text


async def test_filters_and_cursor_pages(world: World) -> None:
    c = world.c
    for i in range(5):
        r = await c.post("/admin/keys", headers=MASTER, json={"team": "alpha", "id": f"page-{i}"})
        assert r.status_code == 201
    got = await entries(c, action="key.create", actor="master")
    assert [e["target"] for e in got[:5]] == [f"page-{i}" for i in range(4, -1, -1)]
    assert all(e["actor"] == "master" and e["action"] == "key.create" for e in got)
    assert [e["target"] for e in await entries(c, target="page-2")] == ["page-2"]
    seen: list[str] = []
    cursor = None
    while True:
        q = {"action": "key.create", "actor": "master", "limit": "2"} | ({"cursor": cursor} if cursor else {})
        page = (await c.get("/admin/audit", headers=MASTER, params=q)).json()
        seen += [e["target"] for e in page["data"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == [e["target"] for e in got]
    assert await entries(c, **{"from": "2000-01-01", "to": "2000-01-02"}) == []
    today = got[0]["at"][:10]
    same_day = await entries(c, action="key.create", actor="master", **{"from": today, "to": today})
    assert len(same_day) == len(got)  # a date is a whole day, to inclusive
    assert await entries(c, **{"from": f"{today}T00:00:00Z", "to": f"{today}T00:00:00Z"}) == []
    r = await c.get("/admin/audit", headers=MASTER, params={"cursor": "nope"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "cursor"
    # A team admin of alpha reads alpha's entries and nothing else.
    mine = (await c.get("/admin/audit", headers=world.auth["team_admin"], params={"limit": "1000"})).json()
    assert mine["data"] and all(e["teams"] == ["alpha"] for e in mine["data"])


async def test_sign_in_failed_sign_in_and_sign_out_are_recorded(world: World) -> None:
    c = world.c
    r = await c.post("/ui/login", data={"master_key": "wrong"})
    assert r.status_code == 401
    r = await c.post("/ui/login", data={"master_key": MASTER["authorization"][7:]})
    assert r.status_code == 303
    page = await c.get("/ui")
    csrf = re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text)
    assert csrf
    r = await c.post("/ui/logout", headers={"x-csrf-token": csrf.group(1)})
    assert r.status_code == 303
    got = [(e["action"], e["actor"]) for e in (await entries(c))[:3]]
    assert got == [("console.sign_out", "master"), ("console.sign_in", "master"),
                   ("console.sign_in_failed", "anonymous")]
    assert "wrong" not in str(await entries(c))


@pytest.fixture
async def ledger_client(database_url: str) -> AsyncIterator[httpx.AsyncClient]:  # noqa: F811
    cfg = parse_config({"master_key": "master-roles-0123456", "teams": [{"name": "alpha"}],
                        "usage": {"ledger": database_url, "interval": 0.05},
                        "audit": {"retention_days": 30}})
    app = create_app(cfg)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw") as c:
        yield c
    await app.gateway.policies.aclose()


async def test_with_a_ledger_entries_go_to_an_append_only_table(ledger_client, database_url):  # noqa: F811
    c = ledger_client
    for i in range(3):
        r = await c.post("/admin/keys", headers=MASTER, json={"team": "alpha", "id": f"l{i}"})
        assert r.status_code == 201
    page = (await c.get("/admin/audit", headers=MASTER, params={"limit": "2"})).json()
    assert [e["target"] for e in page["data"]] == ["l2", "l1"] and page["next_cursor"].startswith("p")
    rest = (await c.get("/admin/audit", headers=MASTER, params={"cursor": page["next_cursor"]})).json()
    assert [e["target"] for e in rest["data"]] == ["l0"] and rest["next_cursor"] is None
    assert rest["data"][0]["after"]["team"] == "alpha"
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM audit_log") == 3
        for sql in ("UPDATE audit_log SET actor = 'someone'", "DELETE FROM audit_log",
                    "TRUNCATE audit_log"):
            with pytest.raises(asyncpg.RaiseError, match="append-only"):
                await conn.execute(sql)
        assert await conn.fetchval("SELECT count(*) FROM audit_log WHERE actor = 'master'") == 3
    finally:
        await conn.close()


async def test_tokens_their_roles_and_the_trail_outlive_a_restart(redis_url: str) -> None:
    """On a shared store (Redis here; the durable default store keeps the same documents) a new
    gateway process finds the tokens, the roles they carry
    and the audit trail the previous one wrote: nothing of it lives in the process."""
    cfg = config(store={"url": redis_url, "timeout": 2.0})
    ns = f"r{uuid.uuid4().hex[:10]}"

    async def app_client() -> tuple[Any, httpx.AsyncClient]:
        app = create_app(cfg, policies=build_policies(cfg, ns=ns))
        return app, httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw")

    app, c = await app_client()
    r = await c.post("/admin/tokens", headers=MASTER, json={"role": "team_admin", "teams": ["alpha"]})
    token = {"authorization": f"Bearer {r.json()['token']}"}
    r = await c.post("/admin/keys", headers=token, json={"team": "alpha", "id": "kept"})
    assert r.status_code == 201
    await c.aclose()
    await app.gateway.policies.aclose()

    app, c = await app_client()  # the restart
    try:
        me = (await c.get("/admin/me", headers=token)).json()
        assert (me["role"], me["teams"]) == ("team_admin", ["alpha"])
        assert (await c.get("/admin/teams/bravo", headers=token)).status_code == 403
        trail = (await c.get("/admin/audit", headers=MASTER)).json()["data"]
        assert [e["action"] for e in trail] == ["key.create", "token.create"]
        assert (await c.get("/admin/keys/kept", headers=token)).json()["created_by"] == me["id"]
    finally:
        await c.aclose()
        await app.gateway.policies.aclose()
