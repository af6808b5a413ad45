"""The ledger keeps which guards acted on each request, and /admin/usage groups by guard
(group_by=guardrail), from a real PostgreSQL; the matched text is in no row."""

from __future__ import annotations

from typing import Any

from switchyard.core.config import parse_config
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import serve
from tests.policies.ledger.helpers import KEYS, MASTER, ledger_config, wait_rows

MAIL = "jane.doe@example.com"
ADMIN = {"authorization": f"Bearer {MASTER}"}


async def test_group_by_guardrail_from_the_ledger(database_url: str) -> None:
    async with FakeUpstream() as up:
        raw: dict[str, Any] = ledger_config(up.url, database_url)
        raw["models"][0]["guardrails"] = [{"name": "pii", "detectors": ["email"]}]
        raw["teams"][0]["guardrails"] = [{"name": "ips", "detectors": ["ip_address"], "action": "log"},
                                         {"name": "keys", "detectors": ["secret"], "action": "block"}]
        async with serve(parse_config(raw)) as client:
            def send(text: str, key: str = "k1") -> Any:
                return client.post("/v1/chat/completions", headers={"authorization": f"Bearer {KEYS[key]}"},
                                   json={"model": "gpt-4o", "max_tokens": 2,
                                         "messages": [{"role": "user", "content": text}]})
            assert (await send(f"a {MAIL} at 10.0.0.1")).status_code == 200
            assert (await send(f"b {MAIL}")).status_code == 200
            assert (await send("key AKIAIOSFODNN7EXAMPLE")).status_code == 400
            assert (await send("plain")).status_code == 200
            assert (await send("plain again")).status_code == 200
            assert (await send(f"other team {MAIL}", "k2")).status_code == 200
            rows = await wait_rows(database_url, 6)
            assert sorted(r["guardrails"] for r in rows) == ["", "", "keys:block", "pii:redact",
                                                              "pii:redact", "pii:redact,ips:log"]
            u = (await client.get("/admin/usage", headers=ADMIN, params={"group_by": "guardrail"})).json()
            by_team = (await client.get("/admin/usage", headers=ADMIN,
                                        params={"group_by": "team,guardrail", "team": "t"})).json()
    assert u["source"] == "ledger"
    assert [(d["guardrail"], d["requests"]) for d in u["data"]] == [
        ("ips:log", 1), ("keys:block", 1), ("pii:redact", 3)]
    # A request two guards acted on is in both rows; the total counts every request once (the
    # rows' sum would count that one twice and miss the two no guard acted on).
    assert sum(d["requests"] for d in u["data"]) == 5
    assert u["total"]["requests"] == 6 and u["total"]["errors"] == 1
    assert [(d["team"], d["guardrail"], d["requests"], d["errors"]) for d in by_team["data"]] == [
        ("t", "ips:log", 1, 0), ("t", "keys:block", 1, 1), ("t", "pii:redact", 2, 0)]
    assert by_team["total"]["requests"] == 5
    assert MAIL not in str([dict(r) for r in rows]) and "AKIA" not in str([dict(r) for r in rows])
