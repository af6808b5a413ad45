"""Refused requests are recorded: a known key's refusals in the usage records and aggregates with
their status and reason (memory://, Redis, and the ledger), unauthenticated ones only counted per
reason, never with the key they presented; the overview counts them and says who is refused now."""

from __future__ import annotations

import datetime as dt

import redis.asyncio as aioredis

from tests.http.console.conftest import KEY, MASTER_AUTH, complete, console_config, gateway

WRONG = "sk-not-a-key-9d1c"
EXPIRED = "sk-console-expired"


def config(upstream_url: str, store: str = "memory://", ledger: str | None = None):
    # "narrow" may use openai/other only (a configured model: allow-lists name real ones).
    models = [{"name": "openai/gpt-4o", "aliases": ["gpt-4o"],
               "price": {"prompt_per_1m": 2.5, "completion_per_1m": 10.0},
               "deployments": [{"name": "d1", "base_url": upstream_url, "model": "gpt-4o"}]},
              {"name": "openai/other", "price": {"prompt_per_1m": 1.0, "completion_per_1m": 1.0},
               "deployments": [{"name": "d1", "base_url": upstream_url}]}]
    return console_config(
        upstream_url, store=store, ledger=ledger, models=models,
        teams=[{"name": "ml", "limits": {"spend_per_day": 1.0}}, {"name": "ops", "limits": {"rpm": 2}},
               {"name": "broke", "limits": {"spend_per_day": 0.000001}}],
        keys=[{"id": "alice", "team": "ml", "key": KEY},
              {"id": "narrow", "team": "ml", "key": "sk-console-narrow", "models": ["openai/other"]},
              {"id": "bob", "team": "ops", "key": "sk-console-bob"},
              {"id": "carol", "team": "broke", "key": "sk-console-carol"},
              {"id": "old", "team": "ml", "key": EXPIRED}])


async def refuse_some(c) -> None:
    """2 answered, and refused: 1 model not allowed, 1 bad parameter, 1 rpm, 1 spend quota;
    unauthenticated: 1 missing key, 2 invalid, 1 expired, 1 GET (refused before its key is read)."""
    assert (await complete(c, KEY)).status_code == 200
    assert (await complete(c, "sk-console-narrow")).status_code == 403
    r = await c.post("/v1/chat/completions", headers={"authorization": f"Bearer {KEY}"},
                     json={"model": "openai/gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                           "temperature": "hot"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
    assert [(await complete(c, "sk-console-bob")).status_code for _ in range(3)] == [200, 200, 429]
    assert (await complete(c, "sk-console-carol")).status_code == 429
    assert (await c.post("/v1/chat/completions", json={"model": "openai/gpt-4o"})).status_code == 401
    assert (await complete(c, WRONG)).status_code == 401
    assert (await complete(c, WRONG + "x")).status_code == 401
    r = await c.patch("/admin/keys/old", headers=MASTER_AUTH, json={"expires_at": "2020-01-01T00:00:00Z"})
    assert r.status_code == 200, r.text
    assert (await complete(c, EXPIRED)).status_code == 401
    # refused before any key was read (the HTTP layer): counted the same way
    r = await c.get("/v1/chat/completions", headers={"authorization": f"Bearer {KEY}"})
    assert r.status_code == 405
    await c.app.state.gateway.drain()  # type: ignore[attr-defined]
    await c.app.state.gateway.policies.refusals.flush()  # type: ignore[attr-defined]


REFUSED = {("narrow", "model_not_allowed", 403), ("alice", "bad_request:temperature", 400),
           ("bob", "rate_limit:rpm@team", 429), ("carol", "quota:spend_day@team", 429)}


async def check_overview(c) -> None:
    for rng in ("1h", "24h", "30d"):
        r = await c.get(f"/admin/overview?range={rng}", headers=MASTER_AUTH)
        assert r.status_code == 200, r.text
        o = r.json()
        t = o["total"]
        assert (t["requests"], t["errors"], t["refused"]) == (7, 4, 4), rng
        assert sum(s["refused"] for s in o["series"]) == 4
        assert o["unauthenticated"] == {"expired_key": 1, "invalid_key": 2, "method_not_allowed": 1,
                                        "missing_key": 1}, rng
        assert o["timezone"] == "UTC"
        now = {(r["key"], r["reason"]) for r in o["refused_now"]}
        assert now == {(k, why) for k, why, _ in REFUSED}, rng
        assert all(r["refused"] == 1 and r["last"].endswith("Z") for r in o["refused_now"])
    o = (await c.get("/admin/overview?range=1h", headers=MASTER_AUTH)).json()
    assert o["bucket"] == "minute" and len(o["series"]) in (61, 62)
    # over the last hour, who was refused and why (the store: from its newest records)
    assert {(r["key"], r["reason"], r["refused"]) for r in o["refused"]} == {(k, w, 1) for k, w, _ in REFUSED}
    assert all(s["t"].endswith(":00Z") for s in o["series"])
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M")
    assert sum(s["requests"] for s in o["series"] if s["t"][:16] >= stamp[:15]) >= 1  # the last minutes


async def test_refusals_recorded_in_memory(upstream):
    async with gateway(config(upstream.url)) as c:
        await refuse_some(c)
        await check_overview(c)
        recs = (await c.get("/admin/usage/records?team=ml", headers=MASTER_AUTH)).json()["data"]
        got = {(r["key_id"], r["reason"], r["status"]) for r in recs if r["reason"]}
        assert got == {x for x in REFUSED if x[0] in ("narrow", "alice")}
        refused = [r for r in recs if r["reason"]]
        assert all(r["attempts"] == 0 and r["deployment"] == "" and r["prompt_tokens"] == 0 for r in refused)
        # the configured name the request resolved to; none when the body did not parse
        assert {(r["key_id"], r["model"]) for r in refused} == {("narrow", "openai/gpt-4o"), ("alice", "")}
        agg = (await c.get("/admin/usage?group_by=key", headers=MASTER_AUTH)).json()
        by = {r["key"]: (r["requests"], r["errors"], r["refused"]) for r in agg["data"]}
        assert by == {"alice": (2, 1, 1), "narrow": (1, 1, 1), "bob": (3, 1, 1), "carol": (1, 1, 1)}


async def test_refusals_recorded_in_redis_without_the_presented_key(upstream, redis_url):
    url = redis_url.rsplit("/", 1)[0] + "/5"
    r = aioredis.from_url(url)
    await r.flushdb()
    try:
        async with gateway(config(upstream.url, store=url)) as c:
            await refuse_some(c)
            await check_overview(c)
            recs = (await c.get("/admin/usage/records?team=ops", headers=MASTER_AUTH)).json()["data"]
            got = [(x["status"], x["reason"]) for x in recs]
            assert got == [(429, "rate_limit:rpm@team"), (200, ""), (200, "")]
        # Nothing in the store names (or hashes) a key that was presented and refused.
        dump = b""
        async for k in r.scan_iter(count=1000):
            t = await r.type(k)
            dump += k + (str(await r.hgetall(k)).encode() if t == b"hash" else
                         str(await r.xrange(k)).encode() if t == b"stream" else b"")
        assert b"unauth" in dump and b"invalid_key" in dump
        for secret in (WRONG, EXPIRED, "sk-console-carol"):
            assert secret.encode() not in dump
    finally:
        await r.flushdb()
        await r.aclose()


async def test_refusals_in_the_ledger(upstream, database_url):
    from tests.policies.ledger.helpers import wait_rows

    async with gateway(config(upstream.url, ledger=database_url)) as c:
        await refuse_some(c)
        rows = await wait_rows(database_url, 7)
        got = {(r["key_id"], r["reason"], r["status"]) for r in rows if r["reason"]}
        assert got == REFUSED
        await check_overview(c)
        r = (await c.get("/admin/usage/records?status=429", headers=MASTER_AUTH)).json()
        assert {(x["key_id"], x["reason"]) for x in r["data"]} == {("bob", "rate_limit:rpm@team"),
                                                                   ("carol", "quota:spend_day@team")}
        agg = (await c.get("/admin/usage?status=429&group_by=key,reason", headers=MASTER_AUTH)).json()
        assert [(x["key"], x["reason"], x["refused"]) for x in agg["data"]] == [
            ("bob", "rate_limit:rpm@team", 1), ("carol", "quota:spend_day@team", 1)]
        o = (await c.get("/admin/overview?range=24h", headers=MASTER_AUTH)).json()
        got = {(x["key"], x["reason"], x["refused"]) for x in o["refused"]}
        assert got == {(k, w, 1) for k, w, _ in REFUSED}


async def test_a_store_out_of_reach_drops_refusal_records_without_delaying_answers(upstream):
    from tests.conftest import free_port

    async with gateway(config(upstream.url, store=f"redis://127.0.0.1:{free_port()}/0")) as c:
        gw = c.app.state.gateway  # type: ignore[attr-defined]
        r = await complete(c, WRONG)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"  # the key cannot be checked
        await gw.policies.refusals.flush()
        assert gw.policies.refusals.dropped == 1  # tried once, failed, dropped
        assert (await complete(c, WRONG)).status_code == 503
        assert not gw.policies.refusals._tasks and gw.policies.refusals.dropped == 2  # not even tried
