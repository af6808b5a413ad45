"""Tags, end users and sessions in the ledger: each row carries them, and /admin/usage groups and
filters by them (with key, which the store's aggregates cannot), from usage_records."""

from __future__ import annotations

from switchyard.core.config import parse_config
from tests.gateway.conftest import serve
from tests.policies.ledger.helpers import KEYS, MASTER, ledger_config, wait_rows

ADMIN = {"authorization": f"Bearer {MASTER}"}


async def test_the_ledger_groups_by_tag_end_user_and_session(upstream, database_url):
    async with serve(parse_config(ledger_config(upstream.url, database_url))) as c:
        sent = [("k1", {"x-switchyard-tags": "search,chat", "x-switchyard-session": "s-1"}, "u-7"),
                ("k1", {"x-switchyard-tags": "search"}, None),
                ("k2", {"x-switchyard-session": "s-1"}, "u-7"),
                ("k2", {}, None)]
        for i, (key, headers, user) in enumerate(sent):
            body = {"model": "openai/gpt-4o", "max_tokens": 2,
                    "messages": [{"role": "user", "content": "hi"}]}
            r = await c.post("/v1/chat/completions", json=body | ({"user": user} if user else {}),
                             headers={"authorization": f"Bearer {KEYS[key]}", "x-request-id": f"req-{i}",
                                      **headers})
            assert r.status_code == 200, r.text
        # in the order sent (requests of the same millisecond tie on ts)
        rows = sorted(await wait_rows(database_url, 4), key=lambda r: r["request_id"])
        assert [r["request_id"] for r in rows] == [f"req-{i}" for i in range(4)]
        assert [(r["tags"], r["end_user"], r["session"]) for r in rows] == [
            ("search,chat", "u-7", "s-1"), ("search", "", ""), ("", "u-7", "s-1"), ("", "", "")]

        async def usage(**q: str) -> dict:
            r = await c.get("/admin/usage", headers=ADMIN, params=q)
            assert r.status_code == 200, r.text
            return r.json()

        u = await usage(group_by="tag,key")
        assert [(d["tag"], d["key"], d["requests"]) for d in u["data"]] == [
            ("chat", "k1", 1), ("search", "k1", 2)]
        assert u["total"]["requests"] == 4
        u = await usage(group_by="end_user")
        assert [(d["end_user"], d["requests"]) for d in u["data"]] == [("u-7", 2)]
        u = await usage(group_by="key", session="s-1")
        assert [(d["key"], d["requests"]) for d in u["data"]] == [("k1", 1), ("k2", 1)]
        assert u["total"]["requests"] == 2
        u = await usage(tag="chat")
        assert u["total"]["requests"] == 1 and u["total"]["cost_usd"] == rows[0]["cost_nano"] / 1e9
        r = await c.get("/admin/usage/records", headers=ADMIN, params={"team": "t"})
        got = {(d["tags"], d["session"]) for d in r.json()["data"]}
        assert got == {("search,chat", "s-1"), ("search", "")}
