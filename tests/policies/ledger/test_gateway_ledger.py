"""N requests through the gateway (memory:// store) -> N ledger rows carrying exactly what the
upstream reported; /admin/usage and /admin/usage/records answered from the ledger."""

from __future__ import annotations

import csv
import io
import json

import httpx

from switchyard.core.config import parse_config
from tests.conftest import free_port
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import serve
from tests.policies.ledger.helpers import KEYS, MASTER, expected_cost, ledger_config, wait_rows

ADMIN = {"authorization": f"Bearer {MASTER}"}


async def send(client: httpx.AsyncClient, i: int) -> httpx.Response:
    key = KEYS["k1"] if i % 3 else KEYS["k2"]
    body = {"model": "gpt-4o" if i % 2 else "openai/gpt-4o", "max_tokens": 1 + i % 7,
            "messages": [{"role": "user", "content": "word " * (i % 5 + 1)}]}
    if i % 4 == 0:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return await client.post("/v1/chat/completions", json=body,
                             headers={"authorization": f"Bearer {key}", "x-request-id": f"req-{i}"})


async def test_n_requests_make_n_rows_with_what_the_upstream_reported(upstream, database_url):
    n = 40
    config = parse_config(ledger_config(upstream.url, database_url))
    async with serve(config) as client:
        rs = [await send(client, i) for i in range(n)]
        assert {r.status_code for r in rs} == {200}
        # A request refused before admission (unknown key) leaves no row.
        assert (await client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": []},
                                  headers={"authorization": "Bearer nope"})).status_code == 401
        rows = await wait_rows(database_url, n)
        assert len(rows) == n
        by_req = {r["request_id"]: r for r in rows}
        assert len(by_req) == n and len({r["ticket_id"] for r in rows}) == n
        for i, resp in enumerate(rs):
            row = by_req[f"req-{i}"]
            upstream_usage = upstream_reported(upstream, i)
            if i % 4:  # the caller was told the same usage
                told = resp.json()["usage"]
                assert (told["prompt_tokens"], told["completion_tokens"]) == upstream_usage
            assert (row["prompt_tokens"], row["completion_tokens"]) == upstream_usage
            assert row["cost_nano"] == expected_cost(*upstream_usage)
            assert row["key_id"] == ("k1" if i % 3 else "k2") and row["team"] == ("t" if i % 3 else "u")
            assert row["model"] == "openai/gpt-4o"
            assert row["requested_model"] == ("gpt-4o" if i % 2 else "openai/gpt-4o")
            assert (row["deployment"], row["status"], row["attempts"], row["cut"]) == (
                "openai/gpt-4o/d1", 200, 1, False)
            assert row["endpoint"] == "/v1/chat/completions" and row["dialect"] == "chat"
            assert row["latency_ms"] > 0 and row["ttfb_ms"] > 0
        text = " ".join(str(v) for r in rows for v in r.values())
        assert not any(k in text for k in KEYS.values())  # never the key
        assert "word" not in text  # never the prompt

        # Aggregates from the ledger, in the store's shape.
        u = (await client.get("/admin/usage", headers=ADMIN, params={"group_by": "team,key"})).json()
        assert u["source"] == "ledger"
        k2 = sum(1 for i in range(n) if not i % 3)
        assert [(d["team"], d["key"], d["requests"]) for d in u["data"]] == [("t", "k1", n - k2),
                                                                            ("u", "k2", k2)]
        assert u["total"]["prompt_tokens"] == sum(r["prompt_tokens"] for r in rows)
        assert u["total"]["cost_nano"] == sum(r["cost_nano"] for r in rows)
        u = (await client.get("/admin/usage", headers=ADMIN,
                              params={"group_by": "hour,status", "status": "2xx", "team": "u"})).json()
        assert sum(d["requests"] for d in u["data"]) == sum(1 for i in range(n) if not i % 3)
        assert all(d["hour"].endswith(":00:00Z") and d["status"] == 200 for d in u["data"])
        u = (await client.get("/admin/usage", headers=ADMIN, params={"status": "error"})).json()
        assert u["total"]["requests"] == 0 and u["data"] == []
        r = await client.get("/admin/usage", headers=ADMIN, params={"group_by": "key", "format": "csv"})
        assert r.headers["content-type"].startswith("text/csv")
        table = list(csv.DictReader(io.StringIO(r.text)))
        assert [(t["key"], int(t["requests"])) for t in table] == [("k1", 26), ("k2", 14)]

        # Raw rows, a page at a time, newest first: every row once.
        seen: list[str] = []
        cursor = None
        while True:
            params = {"limit": "7", **({"cursor": cursor} if cursor else {})}
            page = (await client.get("/admin/usage/records", headers=ADMIN, params=params)).json()
            seen += [d["ticket_id"] for d in page["data"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert sorted(seen) == sorted(r["ticket_id"] for r in rows) and len(seen) == n
        ts = [d["ts_ms"] for d in (await client.get("/admin/usage/records", headers=ADMIN,
                                                      params={"limit": "100"})).json()["data"]]
        assert ts == sorted(ts, reverse=True)
        page = (await client.get("/admin/usage/records", headers=ADMIN,
                                 params={"key": "k2", "format": "json"})).json()
        assert {d["key_id"] for d in page["data"]} == {"k2"} and len(page["data"]) == 14
        r = await client.get("/admin/usage/records", headers=ADMIN, params={"team": "t", "format": "csv"})
        assert len(list(csv.DictReader(io.StringIO(r.text)))) == 26
        r = await client.get("/admin/usage/records", headers=ADMIN, params={"cursor": "garbage"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "cursor"
        r = await client.get("/admin/usage", headers=ADMIN, params={"status": "teapot"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "status"


def upstream_reported(upstream: FakeUpstream, i: int) -> tuple[int, int]:
    """What the fake upstream reported for request ``i`` (requests go one at a time): it counts
    the words of the messages' JSON, and answers max_tokens words."""
    body = upstream.requests[i].body
    return len(json.dumps(body["messages"]).split()), upstream.requests[i].bound


async def test_without_postgres_requests_are_served_and_usage_reads_are_503(upstream):
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"  # nothing listens there
    config = parse_config(ledger_config(upstream.url, down))
    async with serve(config) as client:
        for _ in range(3):
            r = await client.post("/v1/chat/completions", headers={"authorization": f"Bearer {KEYS['k1']}"},
                                  json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]})
            assert r.status_code == 200
        for path in ("/admin/usage", "/admin/usage/records"):
            r = await client.get(path, headers=ADMIN)
            assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
            assert "usage ledger is unavailable" in r.json()["error"]["message"]
        feed = client.app.state.gateway.policies.ledger.feed  # type: ignore[attr-defined]
        assert feed.pending == 3  # waiting, not dropped
