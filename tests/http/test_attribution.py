"""Attribution: tags, end users and sessions read from headers and bodies, validated, kept from the
upstream, on every usage record, and summed by /admin/usage?group_by=tag|end_user|session from
the store's aggregates (in-process, and Redis through its scripts)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from switchyard.core.config import parse_config
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import KEY, MASTER, serve

ADMIN = {"authorization": f"Bearer {MASTER}"}
HI = [{"role": "user", "content": "hi"}]


def config(up: FakeUpstream, claude: FakeAnthropic, store: str, **usage: Any) -> Any:
    return parse_config({
        "logging": {"access": False}, "master_key": MASTER, "store": {"url": store, "timeout": 2.0},
        "usage": usage,
        "models": [{"name": "openai/gpt-4o", "price": {"prompt_per_1m": 1000, "completion_per_1m": 1000},
                    "deployments": [{"name": "o", "base_url": up.url, "model": "gpt-4o"}]},
                   {"name": "anthropic/claude", "price": {"prompt_per_1m": 1000, "completion_per_1m": 1000},
                    "deployments": [{"name": "a", "provider": "anthropic", "base_url": claude.url,
                                     "api_key": claude.key, "model": "claude-sonnet-4-5"}]}],
        "teams": [{"name": "t"}], "keys": [{"id": "k1", "team": "t", "key": KEY}]})


async def chat(c: Any, headers: dict[str, str] | None = None, **body: Any) -> Any:
    return await c.post("/v1/chat/completions", headers=headers or {},
                        json={"model": "openai/gpt-4o", "messages": HI, "max_tokens": 3, **body})


async def usage(c: Any, **q: str) -> dict[str, Any]:
    r = await c.get("/admin/usage", headers=ADMIN, params=q)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return "memory://"
    url = request.getfixturevalue("redis_url")
    return url.rsplit("/", 1)[0] + f"/{1 + os.getpid() % 14}"  # a db of its own: counts start at 0


async def test_tags_end_users_and_sessions_in_usage(store: str) -> None:
    if store.startswith("redis"):
        import redis.asyncio as redis

        r = redis.from_url(store)
        await r.flushdb()
        await r.aclose()
    async with FakeUpstream() as up, FakeAnthropic() as claude, serve(config(up, claude, store)) as c:
        tagged = {"x-switchyard-tags": "search, chat,search", "x-switchyard-session": "s-1",
                  "x-switchyard-end-user": "u-7"}
        assert (await chat(c, tagged)).status_code == 200
        assert (await chat(c, {"x-switchyard-tags": "search"}, user="u-8")).status_code == 200
        assert (await chat(c, {"x-switchyard-session": "s-1"}, safety_identifier="u-9")).status_code == 200
        assert (await chat(c)).status_code == 200  # none: in the totals, in no row
        # Anthropic's metadata.user_id (Claude Code sends a JSON object): recorded as its digest
        uid = json.dumps({"device_id": "d" * 64, "session_id": "6f1c"})
        r = await c.post("/v1/messages", headers={"x-api-key": KEY},
                         json={"model": "anthropic/claude", "max_tokens": 5, "messages": HI,
                               "metadata": {"user_id": uid}})
        assert r.status_code == 200, r.text
        # never sent upstream
        assert all(not k.lower().startswith("x-switchyard-") for s in up.requests for k in s.headers)
        assert all(not k.lower().startswith("x-switchyard-") for s in claude.requests for k in s.headers)

        by_tag = await usage(c, group_by="tag")
        assert [(d["tag"], d["requests"]) for d in by_tag["data"]] == [("chat", 1), ("search", 2)]
        assert by_tag["total"]["requests"] == 5  # every request, counted once
        by_user = await usage(c, group_by="end_user")
        users = {d["end_user"]: d["requests"] for d in by_user["data"]}
        digest = [u for u in users if u.startswith("sha256:")]
        assert len(digest) == 1 and len(digest[0]) == 7 + 32
        assert users == {"u-7": 1, "u-8": 1, "u-9": 1, digest[0]: 1}
        by_session = await usage(c, group_by="session,model")
        assert [(d["session"], d["model"], d["requests"]) for d in by_session["data"]] == [
            ("s-1", "openai/gpt-4o", 2)]
        one = await usage(c, group_by="model", tag="search")
        assert [(d["model"], d["requests"]) for d in one["data"]] == [("openai/gpt-4o", 2)]
        assert one["total"]["requests"] == 2 and one["total"]["cost_usd"] == by_tag["data"][1]["cost_usd"]
        # the plain groupings are as before: no tag, end user or session rows among the keys
        by_key = await usage(c, group_by="key")
        assert [(d["key"], d["requests"]) for d in by_key["data"]] == [("k1", 5)]
        r = await c.get("/admin/usage", headers=ADMIN, params={"group_by": "tag", "key": "k1"})
        assert r.status_code == 400 and "needs the usage ledger" in r.json()["error"]["message"]


@pytest.mark.parametrize(("headers", "body", "param", "says"), [
    ({"x-switchyard-tags": "a b"}, {}, "x-switchyard-tags", "each tag is at most 64 letters"),
    ({"x-switchyard-tags": ",".join(f"t{i}" for i in range(9))}, {}, "x-switchyard-tags", "at most 8 tags"),
    ({"x-switchyard-tags": "secret"}, {}, "x-switchyard-tags", "tag 'secret' is not one of usage.tags"),
    ({}, {"metadata": {"tags": "search,nope"}}, "metadata.tags", "tag 'nope' is not one of usage.tags"),
    ({"x-switchyard-end-user": "u 7"}, {}, "x-switchyard-end-user", "at most 128 letters"),
    ({"x-switchyard-session": "s" * 129}, {}, "x-switchyard-session", "at most 128 letters"),
])
async def test_bad_attribution_is_a_400_naming_it(headers: dict[str, str], body: dict[str, Any], param: str,
                                                  says: str) -> None:
    async with FakeUpstream() as up, FakeAnthropic() as claude, \
            serve(config(up, claude, "memory://", tags=["search", "chat"])) as c:
        r = await chat(c, headers, **body)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == param and says in err["message"]
        assert not up.requests
        assert (await chat(c, {"x-switchyard-tags": "chat"})).status_code == 200
        assert (await chat(c, {}, metadata={"tags": "search"})).status_code == 200


async def test_budgets_per_tag_and_end_user_set_through_the_admin_api() -> None:
    async with FakeUpstream() as up, FakeAnthropic() as claude, serve(config(up, claude, "memory://")) as c:
        r = await c.put("/admin/teams/t", headers=ADMIN, json={
            "tag_limits": {"search": {"rpm": 1}}, "end_user_limits": {"rpm": 2}})
        assert r.status_code == 200, r.text
        assert r.json()["tag_limits"]["search"]["rpm"] == 1 and r.json()["end_user_limits"]["rpm"] == 2
        assert (await chat(c, {"x-switchyard-tags": "search"})).status_code == 200
        r = await chat(c, {"x-switchyard-tags": "chat,search"})
        assert r.status_code == 429 and r.json()["error"]["message"].startswith(
            "tag search: requests per minute limit 1 reached")
        assert (await chat(c, {"x-switchyard-tags": "chat"})).status_code == 200
        assert [(await chat(c, user="u-7")).status_code for _ in range(3)] == [200, 200, 429]
        assert (await chat(c, user="u-8")).status_code == 200
        r = await c.put("/admin/teams/t", headers=ADMIN, json={"tag_limits": {"search": None},
                                                              "end_user_limits": None})
        assert r.json()["tag_limits"] == {} and r.json()["end_user_limits"] is None
        assert (await chat(c, {"x-switchyard-tags": "search"}, user="u-7")).status_code == 200
