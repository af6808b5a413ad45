"""The admin API answers bad input with a 400 naming it, never a 500: bodies that do not decode,
dates past what a calendar holds, oversized numbers, cursors it never gave; what it stores never
breaks a later read; a 500 that does happen is logged with its cause."""

from __future__ import annotations

import logging
import time

import pytest

from switchyard.core.config import parse_config
from switchyard.core.settings import ConfigError
from switchyard.policies.registry import format_ms
from tests.http import test_admin
from tests.http.test_admin import AUTH

client, replicas = test_admin.client, test_admin.replicas  # the admin API's fixtures


@pytest.mark.parametrize("raw", [b'{"team": "\xff"}', b'{"team": ' + b"[" * 5000 + b"]" * 5000 + b"}",
                                 b'{"team": ' + b'{"a":' * 40 + b"1" + b"}" * 40 + b"}"])
async def test_bodies_that_do_not_decode_or_nest_too_deep_are_400s(client, raw):
    r = await client.post("/admin/keys", headers={**AUTH, "content-type": "application/json"}, content=raw)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "body"


@pytest.mark.parametrize(("query", "param"), [
    ({"to": "9999-12-31"}, "to"), ({"from": "0001-01-01T00:00:00+01:00"}, "from"),
    ({"from": "9999-12-31T23:59:59-01:00"}, "from"), ({"status": "5" * 5000}, "status"),
    ({"cursor": "NQ"}, "cursor"), ({"cursor": "W10"}, "cursor"), ({"limit": "9" * 5000}, "limit")])
async def test_usage_queries_out_of_range_are_400s_naming_the_parameter(client, query, param):
    for path in ("/admin/usage/records", "/admin/usage"):
        r = await client.get(path, headers=AUTH, params=query)
        if path == "/admin/usage" and param in ("status", "cursor"):
            assert r.status_code == 400  # ledger-only parameters, refused by the store either way
            continue
        assert r.status_code == 400, (path, r.text)
        assert r.json()["error"]["param"] == param


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00",
                                  "1960-01-01T00:00:00Z", "+10000-01-01T00:00:00Z"])
async def test_an_expiry_outside_1970_to_9999_is_refused_and_listing_keeps_working(client, when):
    r = await client.post("/admin/keys", headers=AUTH, json={"team": "ml", "id": "exp", "expires_at": when})
    assert r.status_code == 400 and r.json()["error"]["param"] == "expires_at", r.text
    r = await client.post("/admin/keys", headers=AUTH, json={"team": "ml", "id": "exp2"})
    r = await client.patch("/admin/keys/exp2", headers=AUTH, json={"expires_at": when})
    assert r.status_code == 400
    assert (await client.get("/admin/keys", headers=AUTH)).status_code == 200


def test_an_expiry_stored_before_the_bounds_still_shows():
    assert format_ms(-62_135_600_000_000) == "1970-01-01T00:00:00Z"
    assert format_ms(10**17) == "9999-12-31T23:59:59Z"


@pytest.mark.parametrize("limits", [{"spend_per_day": 1e300}, {"tokens_per_day": 10**30}, {"rpm": 2**80}])
async def test_limits_beyond_what_the_store_counts_exactly_are_400s(client, limits):
    r = await client.put("/admin/teams/ml", headers=AUTH, json={"limits": limits})
    assert r.status_code == 400 and r.json()["error"]["param"] == "limits", r.text
    assert "less than or equal" in r.json()["error"]["message"]
    r = await client.post("/admin/keys", headers=AUTH, json={"team": "ml", "limits": limits})
    assert r.status_code == 400


def test_the_config_refuses_them_too():
    with pytest.raises(ConfigError, match="spend_per_day: Input should be less than or equal to 1000000"):
        parse_config({"teams": [{"name": "t", "limits": {"spend_per_day": 1e300}}]})


async def test_limits_stored_before_the_bounds_are_read_at_the_bound(client, replicas):
    a, _ = replicas
    r = await client.post("/admin/keys", headers=AUTH, json={"team": "ml", "id": "legacy"})
    raw = r.json()["key"]
    await a.store.put_doc(a.registry.n["team"] + "ml", {"limits": {"spend_per_day": 1e300}})
    a.keys.forget()
    p = await a.keys.lookup(raw)
    assert p is not None and p.team_limits.spend_per_day == 1e6
    t = await a.policy.admit(p, "openai/gpt-4o", prompt_tokens=10, max_tokens=10)  # a priced model
    assert t.max_tokens == 10
    assert (await client.get("/admin/teams/ml", headers=AUTH)).status_code == 200
    r = await client.put("/admin/teams/ml", headers=AUTH, json={"limits": {"rpm": 5}})
    assert r.status_code == 200 and r.json()["limits"]["spend_per_day"] == 1e6


async def test_rotating_a_long_expired_key_is_a_400_that_writes_nothing(client, replicas):
    a, _ = replicas
    past = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    r = await client.post("/admin/keys", headers=AUTH, json={"team": "ml", "id": "old", "expires_at": past})
    assert r.status_code == 201, r.text
    before = await a.store.get_docs([a.registry.n["keyid"] + "old"])
    r = await client.post("/admin/keys/old/rotate", headers=AUTH, json={})
    assert r.status_code == 400 and "expired" in r.json()["error"]["message"], r.text
    assert await a.store.get_docs([a.registry.n["keyid"] + "old"]) == before  # the same secret
    r = await client.patch("/admin/keys/old", headers=AUTH, json={"expires_at": "2999-01-01T00:00:00Z"})
    assert r.status_code == 200
    r = await client.post("/admin/keys/old/rotate", headers=AUTH, json={"grace_seconds": 0})
    assert r.status_code == 201, r.text


async def test_a_bug_is_a_json_500_logged_with_its_cause(client, replicas, monkeypatch, caplog):
    a, _ = replicas

    async def broken() -> list[str]:
        raise RuntimeError("cause-of-the-bug")

    monkeypatch.setattr(a.registry, "team_names", broken)
    caplog.set_level(logging.ERROR, logger="switchyard")
    r = await client.get("/admin/teams", headers=AUTH)
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    assert "cause-of-the-bug" not in r.text
    rec = [x for x in caplog.records if x.name == "switchyard.admin"]
    assert rec and rec[0].exc_info is not None and "cause-of-the-bug" in str(rec[0].exc_info[1])
