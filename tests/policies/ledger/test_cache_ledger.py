"""Response cache hits in the ledger (docs/cache.md): a row each, marked, charging nothing, with
what the hit saved; /admin/usage from the ledger carries cache_hits, saved_tokens, saved_usd."""

from __future__ import annotations

import pytest

from switchyard.core.config import parse_config
from tests.gateway.conftest import serve
from tests.policies.ledger.helpers import KEYS, MASTER, expected_cost, ledger_config, wait_rows

ADMIN = {"authorization": f"Bearer {MASTER}"}


async def test_hits_are_ledger_rows_that_saved_and_charged_nothing(upstream, database_url):
    raw = ledger_config(upstream.url, database_url)
    raw["models"][0]["cache"] = {"mode": "exact", "ttl": 60}
    body = {"model": "gpt-4o", "temperature": 0, "max_tokens": 3,
            "messages": [{"role": "user", "content": "c"}]}
    auth = {"authorization": f"Bearer {KEYS['k1']}"}
    async with serve(parse_config(raw)) as client:
        rs = [await client.post("/v1/chat/completions", json={**body, "stream": i == 2},
                                headers={**auth, "x-request-id": f"req-{i}"}) for i in range(3)]
        # in the order sent (requests of the same millisecond tie on ts)
        rows = sorted(await wait_rows(database_url, 3), key=lambda r: r["request_id"])
        assert [r["request_id"] for r in rows] == ["req-0", "req-1", "req-2"]
        usage = (await client.get("/admin/usage", headers=ADMIN, params={"group_by": "key"})).json()
    assert [r.headers["x-switchyard-cache"] for r in rs] == ["stored", "hit", "hit"]
    assert len(upstream.requests) == 1
    u = rs[0].json()["usage"]
    spent = expected_cost(u["prompt_tokens"], u["completion_tokens"])
    first, *hits = rows
    assert not first["cache_hit"] and first["cost_nano"] == spent and first["saved_nano"] == 0
    for h in hits:
        assert h["cache_hit"] and h["status"] == 200 and h["attempts"] == 0
        assert (h["prompt_tokens"], h["completion_tokens"], h["cost_nano"]) == (0, 0, 0)
        assert h["saved_tokens"] == u["total_tokens"] and h["saved_nano"] == spent
    assert usage["source"] == "ledger"
    total = usage["total"]
    assert (total["requests"], total["cache_hits"], total["saved_tokens"]) == (3, 2, 2 * u["total_tokens"])
    assert total["saved_usd"] == pytest.approx(2 * spent / 1e9)
    assert total["cost_nano"] == spent
    assert usage["data"][0]["cache_hits"] == 2
