"""The two-team world the role and audit tests share: teams alpha and bravo, each with keys, a
token and usage records, and an actor per role; and the matrix of what each actor gets on each
/admin route (``CASES``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from switchyard.core.config import parse_config
from switchyard.http.app import create_app
from switchyard.policies.store import UsageRecord

MASTER = {"authorization": "Bearer master-roles-0123456"}
SCOPED = ("team_admin", "member", "viewer_alpha")  # the actors limited to team alpha


def config(**extra: Any) -> Any:
    return parse_config(extra | {
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
                       status=429, latency_ms=1.0, reason="rate_limit:rpm", ticket_id=uuid.uuid4().hex)


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
