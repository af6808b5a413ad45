"""The console's admin reads: deployments (from the router's state), overview, latency percentiles."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

from switchyard.http.console.overview import overview
from tests.fakes.upstream import Behaviour
from tests.http.console.conftest import KEY, MASTER_AUTH, complete, console_config, gateway


async def test_a_deployment_shows_the_model_name_its_upstream_is_sent(upstream):
    """Without ``model:`` a deployment sends the route's model_name (gpt-4o), not vendor/name."""
    deps = [{"name": "d1", "base_url": upstream.url, "model": "gpt-4o-2024-08-06"},
            {"name": "d2", "base_url": upstream.url}]
    cfg = console_config(upstream.url, models=[{"name": "openai/gpt-4o", "deployments": deps}])
    async with gateway(cfg) as c:
        data = (await c.get("/admin/deployments", headers=MASTER_AUTH)).json()["data"]
    assert [(d["name"], d["upstream_model"]) for d in data] == [
        ("openai/gpt-4o/d1", "gpt-4o-2024-08-06"), ("openai/gpt-4o/d2", "gpt-4o")]


async def test_deployments_show_circuit_cooldown_and_recent_errors(upstream):
    async with gateway(console_config(upstream.url)) as c:
        r = await c.get("/admin/deployments", headers=MASTER_AUTH)
        (d,) = r.json()["data"]
        assert d["name"] == "openai/gpt-4o/d1" and d["healthy"] and d["circuit"] == "closed"
        assert d["recent_errors"] == [] and d["latency_ms"] is None and r.json()["inflight"] == 0
        assert (await complete(c, KEY)).status_code == 200
        d = (await c.get("/admin/deployments", headers=MASTER_AUTH)).json()["data"][0]
        assert d["latency_ms"] is not None and d["latency_ms"] >= 0
        upstream.script += [Behaviour(status=500, error="boom one"), Behaviour(status=500, error="boom two")]
        assert (await complete(c, KEY)).status_code >= 500
        assert (await complete(c, KEY)).status_code >= 500
        r = await c.get("/admin/deployments", headers=MASTER_AUTH)
        d = r.json()["data"][0]
        assert d["circuit"] == "open" and not d["healthy"] and d["consecutive_failures"] == 2
        assert 25 < d["cooldown_s"] <= 30
        assert len(d["recent_errors"]) == 2 and all(e["at"].endswith("Z") for e in d["recent_errors"])
        assert all(e["status"] >= 500 for e in d["recent_errors"])
        assert KEY not in r.text
        assert (await c.get("/admin/deployments")).status_code == 401


async def test_an_upstreams_retry_after_is_capped_and_an_operator_can_close_the_breaker(upstream):
    """A 429 asking for a year holds the deployment for ``router.retry_after_max`` at most (and
    tells the caller no more); ``POST /admin/deployments/reset`` closes the breaker at once."""
    year = 365 * 24 * 3600
    async with gateway(console_config(upstream.url, router={"retries": 0, "retry_after_max": 120})) as c:
        upstream.script.append(Behaviour(status=429, retry_after=year, error="slow down"))
        limited = await complete(c, KEY)
        d = (await c.get("/admin/deployments", headers=MASTER_AUTH)).json()["data"][0]
        assert d["circuit"] == "open" and 110 < d["cooldown_s"] <= 120
        assert d["cooldown_until"].endswith("Z")
        bad = [await c.post("/admin/deployments/reset", headers=MASTER_AUTH, json=body)
               for body in ({}, {"deployment": 3}, {"deployment": "openai/gpt-4o/nope"})]
        anon = await c.post("/admin/deployments/reset", json={"deployment": "openai/gpt-4o/d1"})
        r = await c.post("/admin/deployments/reset", headers=MASTER_AUTH,
                         json={"deployment": "openai/gpt-4o/d1"})
        served = await complete(c, KEY)
    assert limited.status_code == 429 and limited.headers["retry-after"] == "120"
    assert [b.status_code for b in bad] == [400, 400, 404]
    assert all(b.json()["error"]["param"] == "deployment" for b in bad)
    assert anon.status_code == 401
    assert r.status_code == 200, r.text
    closed = r.json()
    assert closed["circuit"] == "closed" and closed["cooldown_s"] == 0 and closed["cooldown_until"] is None
    assert served.status_code == 200, served.text

async def test_overview_and_latency_count_the_requests_made(upstream):
    async with gateway(console_config(upstream.url)) as c:
        for _ in range(5):
            assert (await complete(c, KEY)).status_code == 200
        upstream.script.append(Behaviour(status=400, error="bad"))
        await complete(c, KEY)
        await c.app.state.gateway.drain()  # type: ignore[attr-defined]  # every settlement written
        for rng in ("1h", "24h", "30d"):
            o = (await c.get(f"/admin/overview?range={rng}", headers=MASTER_AUTH)).json()
            # The last hour by minute, from the store's minute sums; longer ranges by day.
            assert o["source"] == "store" and o["bucket"] == ("minute" if rng == "1h" else "day")
            assert o["total"]["requests"] == 6 and o["total"]["errors"] == 1, rng
            assert o["total"]["refused"] == 0  # the upstream's 400 was not the gateway's refusal
            assert sum(s["requests"] for s in o["series"]) == 6
            assert [m["model"] for m in o["by_model"]] == ["openai/gpt-4o"]
            assert [(t["team"], t["requests"]) for t in o["by_team"]] == [("ml", 6)]
            assert o["latency"]["samples"] == 6 and o["inflight"] == 0
        assert len(o["series"]) in (30, 31)
        o = (await c.get("/admin/overview?range=1h", headers=MASTER_AUTH)).json()
        assert len(o["series"]) in (61, 62) and o["series"][-1]["t"].endswith(":00Z")
        assert o["series"][-1]["requests"] + o["series"][-2]["requests"] == 6  # this minute (or the last)
        lat = (await c.get("/admin/usage/latency?window=600", headers=MASTER_AUTH)).json()
        assert lat["samples"] == 6 and lat["source"] == "store"
        assert 0 < lat["p50_ms"] <= lat["p95_ms"]
        assert lat["ttfb_p50_ms"] is not None and lat["ttfb_p50_ms"] <= lat["ttfb_p95_ms"]
        none = (await c.get("/admin/usage/latency?team=ops", headers=MASTER_AUTH)).json()
        assert none["samples"] == 0 and none["p50_ms"] is None
        r = await c.get("/admin/overview?range=7y", headers=MASTER_AUTH)
        assert r.status_code == 400 and r.json()["error"]["param"] == "range"
        r = await c.get("/admin/usage/latency?window=abc", headers=MASTER_AUTH)
        assert r.status_code == 400 and r.json()["error"]["param"] == "window"


async def test_the_overview_reads_each_teams_records_and_month_once(upstream, monkeypatch):
    """Without a ledger the errors, guardrails and refusals come from each team's newest records,
    the budgets and the month's spend from its month of daily sums: one read of each per team."""
    async with gateway(console_config(upstream.url)) as c:
        assert (await complete(c, KEY)).status_code == 200
        await c.app.state.gateway.drain()  # type: ignore[attr-defined]
        policies = c.app.state.gateway.policies  # type: ignore[attr-defined]
        reads: Counter[tuple[str, str]] = Counter()

        def counted(name: str) -> Any:
            real = getattr(policies.store, name)

            async def read(team: str, *args: Any, **kw: Any) -> Any:
                reads[name, team] += 1
                return await real(team, *args, **kw)
            return read

        for name in ("records", "aggregates"):
            monkeypatch.setattr(policies.store, name, counted(name))
        # 1h: the series come from the minute sums, who was refused from the records
        o = await overview(policies, "1h", dt.datetime.now(dt.UTC))
        assert o["total"]["requests"] == 1 and [m["team"] for m in o["month"]] == ["ml", "ops"]
        assert reads == {(name, team): 1 for name in ("records", "aggregates") for team in ("ml", "ops")}


async def test_overview_from_the_ledger_buckets_by_hour(upstream, database_url):
    async with gateway(console_config(upstream.url, ledger=database_url)) as c:
        for _ in range(3):
            assert (await complete(c, KEY)).status_code == 200
        from tests.policies.ledger.helpers import wait_rows
        await wait_rows(database_url, 3)
        o = (await c.get("/admin/overview?range=24h", headers=MASTER_AUTH)).json()
        assert o["source"] == "ledger" and o["bucket"] == "hour" and len(o["series"]) in (25, 26)
        assert o["total"]["requests"] == 3 and o["series"][-1]["t"].endswith(":00:00Z")
        lat = (await c.get("/admin/usage/latency", headers=MASTER_AUTH)).json()
        assert lat["source"] == "ledger" and lat["samples"] == 3 and lat["p50_ms"] > 0
