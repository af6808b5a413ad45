"""``/metrics``: what was served, by configured names only; a caller cannot mint series; the
optional token."""

from __future__ import annotations

import random
import string

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import KEY, MASTER, base_config, serve, upstream_model

MODEL = "v/m"


def config(url: str, **extra):  # type: ignore[no-untyped-def]
    models = [{**upstream_model(MODEL, url), "price": {"prompt_per_1m": 1.0, "completion_per_1m": 2.0}},
              upstream_model("w/*", url)]
    return base_config(models, keys=[{"id": "k1", "team": "t", "key": KEY},
                                     {"id": "k2", "team": "t", "key": "sk-limited", "limits": {"rpm": 2}}],
                       **extra)


async def scrape(client: httpx.AsyncClient, **headers: str) -> dict[tuple[str, tuple], float]:
    await client.app.gateway.drain()  # type: ignore[attr-defined]  # every request settled
    r = await client.get("/metrics", headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(r.text) for s in fam.samples}


def value(m: dict, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in m.items() if n == name and labels.items() <= dict(ls).items())


async def test_requests_tokens_spend_latency_and_limits_are_counted(upstream) -> None:
    async with serve(config(upstream.url)) as client:
        for _ in range(3):
            r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 4})
            assert r.status_code == 200
        r = await client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True})
        assert r.status_code == 200
        r = await client.post("/v1/completions", json={"model": "nope/x", "prompt": "hi"})
        assert r.status_code == 404
        assert (await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi"},
                                  headers={"authorization": "Bearer wrong"})).status_code == 401
        limited = {"authorization": "Bearer sk-limited"}
        codes = [(await client.post("/v1/completions", headers=limited,
                                    json={"model": MODEL, "prompt": "hi", "max_tokens": 1})).status_code
                 for _ in range(3)]
        assert codes == [200, 200, 429]
        upstream.script.append(Behaviour(status=500))  # retried once, then served
        assert (await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi",
                                                           "max_tokens": 1})).status_code == 200
        m = await scrape(client)

    ok = dict(model=MODEL, deployment=f"{MODEL}/d1", team="t", status_class="2xx")
    assert value(m, "switchyard_requests_total", **ok, endpoint="/v1/completions", dialect="openai") == 6
    assert value(m, "switchyard_requests_total", **ok, endpoint="/v1/chat/completions", dialect="chat") == 1
    assert value(m, "switchyard_requests_total", model="unknown", status_class="4xx") == 2  # 404, 401
    assert value(m, "switchyard_requests_total", status_class="4xx", model=MODEL) == 1  # the 429
    assert value(m, "switchyard_tokens_total", model=MODEL, kind="completion") == 3 * 4 + 3 + 2 + 1
    prompt = value(m, "switchyard_tokens_total", model=MODEL, kind="prompt")
    assert prompt > 0
    assert abs(value(m, "switchyard_spend_usd_total", model=MODEL)
               - (prompt * 1.0 + 18 * 2.0) / 1e6) < 1e-12
    assert value(m, "switchyard_limiter_decisions_total", decision="admitted") == 7
    assert value(m, "switchyard_limiter_decisions_total", decision="rpm") == 1
    assert value(m, "switchyard_retries_total", model=MODEL) == 1
    assert value(m, "switchyard_request_duration_seconds_count", model=MODEL, status_class="2xx") == 7
    assert value(m, "switchyard_request_duration_seconds_bucket", model=MODEL, le="+Inf",
                 status_class="2xx") == 7
    assert value(m, "switchyard_upstream_duration_seconds_count", model=MODEL) == 7
    assert value(m, "switchyard_gateway_overhead_seconds_count", model=MODEL) == 7
    assert value(m, "switchyard_time_to_first_byte_seconds_count", model=MODEL) == 1
    # Overhead is latency minus upstream time: its sum is smaller than the latency's.
    assert (value(m, "switchyard_gateway_overhead_seconds_sum", model=MODEL)
            < value(m, "switchyard_request_duration_seconds_sum", model=MODEL, status_class="2xx"))
    assert value(m, "switchyard_requests_in_flight") == 0
    assert value(m, "switchyard_store_up") == 1
    assert value(m, "switchyard_circuit_open", deployment=f"{MODEL}/d1") == 0
    # no key label without metrics.per_key
    assert all("key" not in dict(ls) for (n, ls) in m if n == "switchyard_requests_total")


async def test_key_ids_are_labels_only_with_per_key(upstream) -> None:
    async with serve(config(upstream.url, metrics={"per_key": True})) as client:
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi"})
        assert r.status_code == 200
        m = await scrape(client)
    assert value(m, "switchyard_requests_total", key="k1", model=MODEL) == 1
    assert value(m, "switchyard_tokens_total", key="k1", kind="completion") > 0


def junk(n: int, extra: str = "/-_.:") -> str:
    return "".join(random.choices(string.ascii_letters + string.digits + extra, k=n))


async def test_a_caller_cannot_create_new_series(upstream) -> None:
    async with serve(config(upstream.url)) as client:
        # One request of each kind first, so every series these can reach exists.
        await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi"})
        await client.post("/v1/completions", json={"model": "w/anything", "prompt": "hi"})
        await client.post("/v1/completions", json={"model": "nope/x", "prompt": "hi"})
        await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi"},
                          headers={"authorization": "Bearer bad"})
        await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi"},
                          headers={"x-switchyard-dialect": "klingon"})
        before = set(await scrape(client))
        for i in range(200):
            kind = i % 5
            headers = {"x-request-id": junk(20), f"x-{junk(6, '-')}": junk(10)}
            if kind == 0:  # a made-up model
                await client.post("/v1/completions", json={"model": junk(12), "prompt": "hi"},
                                  headers=headers)
            elif kind == 1:  # a made-up model under a wildcard vendor: the upstream is asked for it
                await client.post("/v1/completions", json={"model": f"w/{junk(12)}", "prompt": "hi"},
                                  headers=headers)
            elif kind == 2:  # a made-up path
                await client.post(f"/v1/{junk(10)}", json={"model": MODEL}, headers=headers)
            elif kind == 3:  # a made-up dialect header and key
                await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi"},
                                  headers={**headers, "x-switchyard-dialect": junk(8),
                                           "authorization": f"Bearer {junk(30)}"})
            else:  # a pinned deployment that does not exist
                await client.post("/v1/completions", json={"model": f"{MODEL}/{junk(8)}", "prompt": "hi"},
                                  headers=headers)
        after = await scrape(client)
    assert value(after, "switchyard_requests_total") == 5 + 160  # made-up paths are no endpoint
    assert set(after) == before, sorted(set(after) ^ before)


async def test_a_metrics_token_guards_the_endpoint(upstream) -> None:
    async with serve(config(upstream.url, metrics={"token": "scrape-me"})) as client:
        assert (await client.get("/metrics")).status_code == 401
        assert (await client.get("/metrics", headers={"authorization": "Bearer nope"})).status_code == 401
        await scrape(client, authorization="Bearer scrape-me")
        await scrape(client, authorization=f"Bearer {MASTER}")


async def test_metrics_can_be_turned_off(upstream) -> None:
    async with serve(config(upstream.url, metrics={"enabled": False})) as client:
        assert (await client.get("/metrics")).status_code == 404


async def test_the_grafana_dashboard_queries_only_metrics_that_exist(upstream) -> None:
    import json
    import re
    from pathlib import Path

    dash = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {re.sub(r"_(bucket|total)$", "", n) for e in exprs for n in re.findall(r"switchyard_[a-z_]+", e)}
    async with serve(config(upstream.url)) as client:
        await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi"})
        text = (await client.get("/metrics")).text
    exported = {fam.name for fam in text_string_to_metric_families(text)}
    assert used <= exported, used - exported


async def test_team_quota_remaining(upstream) -> None:
    teams = [{"name": "t", "limits": {"tokens_per_day": 1000, "spend_per_month": 2.0}}]
    async with serve(config(upstream.url, teams=teams)) as client:
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 5})
        assert r.status_code == 200
        used = r.json()["usage"]["total_tokens"]
        m = await scrape(client)
    assert value(m, "switchyard_team_quota_remaining", team="t", quota="tokens_per_day") == 1000 - used
    usage = r.json()["usage"]
    spent = (usage["prompt_tokens"] * 1.0 + usage["completion_tokens"] * 2.0) / 1e6
    assert abs(value(m, "switchyard_team_quota_remaining", team="t", quota="spend_per_month")
               - (2.0 - spent)) < 1e-9
    assert not [ls for (n, ls) in m if n == "switchyard_team_quota_remaining"
                and dict(ls)["quota"] in ("tokens_per_month", "spend_per_day")]  # no such quota
