"""A request's life ends in one place: every admitted request is settled once, however it ends,
its slot is free when the caller is gone, and refusals the gateway makes itself cost nothing."""

from __future__ import annotations

import asyncio
import gc
import json

import pytest

from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import KEY, MASTER, base_config, upstream_model
from tests.gateway.helpers import StallingUpstream, recording_policies, wait_for

MODEL = "v/m"


def limited(url: str, **limits: int):  # type: ignore[no-untyped-def]
    return base_config([upstream_model(MODEL, url)], keys=[{"id": "k1", "team": "t", "key": KEY,
                                                             "limits": limits}])


async def test_warning_header_from_hostile_field_names_still_answers_and_settles(upstream, gateway_for):
    cfg = base_config([upstream_model(MODEL, upstream.url, dialect="vllm")],
                      keys=[{"id": "k1", "team": "t", "key": KEY, "limits": {"max_concurrency": 1}}])
    policies, settled = recording_policies(cfg)
    hostile = {"model": MODEL, "prompt": "hi", "max_tokens": 2, "stream": True,
               "caf\u00e9\u2603": 1, "a\r\nx-evil: 1": 2, "nul\u0000": 3}
    async with gateway_for(cfg, policies=policies) as client:
        for _ in range(3):  # the slot comes back each time: a leaked lease would 429 the second
            r = await client.post("/v1/completions", json=hostile)
            assert r.status_code == 200, r.text
            warning = r.headers["x-switchyard-warning"]
            assert "x-evil" in warning and "\r" not in warning and "\n" not in warning
            assert "\\u2603" in warning  # shown escaped, not dropped
            assert "x-evil" not in {k.lower() for k in r.headers}
        await client.app.state.gateway.drain()  # type: ignore[attr-defined]
    assert [s.status for s in settled] == [200, 200, 200]


@pytest.mark.parametrize("plain", [False, True], ids=["switchyard-server", "any-asgi-server"])
async def test_client_leaving_before_the_first_byte_frees_its_slot_at_once(gateway_for, plain):
    async with StallingUpstream() as up:  # answers with one event, then stalls until released
        cfg = limited(up.url, max_concurrency=1)
        policies, settled = recording_policies(cfg)
        async with gateway_for(cfg, policies=policies, plain=plain) as client:
            body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}  # a whole answer: no byte yet
            task = asyncio.create_task(client.post("/v1/completions", json=body))
            await asyncio.wait_for(up.first_sent.wait(), 10)
            task.cancel()  # the caller hangs up while the upstream is still going
            await wait_for(lambda: bool(settled), timeout=5)
            assert settled[0].status == 499
            await wait_for(lambda: up.saw_close, timeout=5)  # the upstream call was closed
            up.release.set()
            r = await client.post("/v1/chat/completions", json={
                "model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code != 429, r.text  # the slot is free again


@pytest.mark.parametrize("plain", [False, True], ids=["switchyard-server", "any-asgi-server"])
async def test_dropped_streams_free_their_slot_before_the_next_request(upstream, gateway_for, plain):
    upstream.default = Behaviour(chunk_delay=0.05)  # 16 events over ~0.8 s
    cfg = limited(upstream.url, max_concurrency=1)
    async with gateway_for(cfg, plain=plain) as client:
        body = {"model": MODEL, "prompt": "hi", "stream": True}
        for i in range(20):
            async with client.stream("POST", "/v1/completions", json=body) as r:
                assert r.status_code == 200, f"round {i}: {await r.aread()!r}"
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        break  # hang up mid-stream; the next round starts at once


async def test_refusals_after_admission_cost_no_request_and_no_tokens(upstream, gateway_for):
    cfg = base_config([{**upstream_model(MODEL, upstream.url), "context_window": 8}],
                      keys=[{"id": "k1", "team": "t", "key": KEY, "limits": {"rpm": 2}}])
    policies, settled = recording_policies(cfg)
    async with gateway_for(cfg, policies=policies) as client:
        for _ in range(5):  # each one is refused by the gateway before any model is called
            r = await client.post("/v1/chat/completions", json={
                "model": MODEL, "messages": [{"role": "user", "content": "x " * 50}], "max_tokens": 4})
            assert r.status_code == 400, r.text
            assert r.headers["x-ratelimit-remaining-requests"] == "1"
        ok = await client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2})
        assert ok.status_code == 200, ok.text
        await client.app.state.gateway.drain()  # type: ignore[attr-defined]
    assert [s.usage.total_tokens for s in settled[:5]] == [0] * 5
    assert upstream.requests and len(upstream.requests) == 1


async def test_upstream_failure_before_any_token_charges_nothing(upstream, gateway_for):
    upstream.script += [Behaviour(status=500)] * 3  # the first attempt and both retries
    cfg = base_config([upstream_model(MODEL, upstream.url)], router={"backoff_base": 0.001})
    policies, settled = recording_policies(cfg)
    async with gateway_for(cfg, policies=policies) as client:
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "a b c d", "max_tokens": 2})
        await client.app.state.gateway.drain()  # type: ignore[attr-defined]
    assert r.status_code == 502
    assert settled[0].status == 502 and settled[0].usage.total_tokens == 0


async def test_429_carries_ratelimit_headers(upstream, gateway_for):
    async with gateway_for(limited(upstream.url, rpm=1)) as client:
        body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
        assert (await client.post("/v1/completions", json=body)).status_code == 200
        r = await client.post("/v1/completions", json=body)
    assert r.status_code == 429
    assert r.headers["x-ratelimit-limit-requests"] == "1"
    assert r.headers["x-ratelimit-remaining-requests"] == "0"
    assert r.headers["x-ratelimit-reset-requests"].endswith("s")
    assert int(r.headers["retry-after"]) >= 1


async def test_request_ids_on_every_answer(upstream, gateway_for):
    async with gateway_for(base_config([upstream_model(MODEL, upstream.url)])) as client:
        mine = await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 1},
                                 headers={"x-request-id": "trace-42.a"})
        assert mine.headers["x-request-id"] == "trace-42.a"
        bad = await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi"},
                                headers={"x-request-id": "no spaces allowed " + "x" * 300})
        assert bad.status_code == 200
        assert " " not in bad.headers["x-request-id"] and len(bad.headers["x-request-id"]) <= 128
        err = await client.post("/v1/completions", content=b"{", headers={"authorization": "Bearer nope"})
        assert err.status_code == 401 and len(err.headers["x-request-id"]) == 32
        other = await client.get("/health")
        assert other.headers["x-request-id"]
        assert len({mine.headers["x-request-id"], bad.headers["x-request-id"],
                    err.headers["x-request-id"], other.headers["x-request-id"]}) == 4


async def test_malformed_bodies_are_400s_naming_the_body(upstream, gateway_for):
    async with gateway_for(base_config([upstream_model(MODEL, upstream.url)])) as client:
        cases = {
            b'{"model": "v/m", "prompt": "\xff\xfe"}': "UTF-8",
            b'{"model": "v/m", "prompt": "hi", "temperature": 1e400}': "out of range",
            b'{"model": "v/m", "prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}": "nested",
            b'{"model": "v/m", "prompt": "hi",': "not valid JSON",
        }
        for raw, words in cases.items():
            r = await client.post("/v1/chat/completions", content=raw)
            assert r.status_code == 400, (raw[:40], r.text)
            assert words in r.json()["error"]["message"] and r.json()["error"]["param"] == "body"
        gz = await client.post("/v1/completions", content=b"\x1f\x8b...",
                               headers={"content-encoding": "gzip", "content-type": "application/json"})
        assert gz.status_code == 415 and gz.json()["error"]["param"] == "content-encoding"
        xml = await client.post("/v1/completions", content=b"<a/>",
                                headers={"content-type": "application/xml"})
        assert xml.status_code == 415 and xml.json()["error"]["param"] == "content-type"
        curl = await client.post("/v1/completions", content=json.dumps(
            {"model": MODEL, "prompt": "hi", "max_tokens": 1}).encode(),
            headers={"content-type": "application/x-www-form-urlencoded"})
        assert curl.status_code == 200, curl.text  # curl -d's default type, as the README shows
    assert len(upstream.requests) == 1


async def test_model_names_are_validated_before_they_reach_shared_state(upstream, gateway_for):
    cfg = base_config([{"name": "v/*", "deployments": [{"name": "d1", "base_url": upstream.url}]}])
    async with gateway_for(cfg) as client:
        for name in ["v/a\x1fb", "v/" + "x" * 300, "v/with space", "v/caf\u00e9"]:
            r = await client.post("/v1/chat/completions", json={
                "model": name, "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 400, (name, r.text)
            assert r.json()["error"]["param"] == "model"
        ok = await client.post("/v1/completions",
                               json={"model": "v/fine-1.0", "prompt": "hi", "max_tokens": 1})
        assert ok.status_code == 200, ok.text
    assert [s.body["model"] for s in upstream.requests] == ["fine-1.0"]


async def test_two_credentials_headers_are_refused(upstream, gateway_for):
    async with gateway_for(base_config([upstream_model(MODEL, upstream.url)])) as client:
        r = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": []},
                              headers=[("authorization", f"Bearer {KEY}"), ("authorization", "Bearer other")])
        admin = await client.get("/admin/keys", headers=[("authorization", f"Bearer {MASTER}"),
                                                          ("authorization", "Bearer other")])
    for answer in (r, admin):
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "authorization"
        assert KEY not in answer.text and MASTER not in answer.text
    assert upstream.requests == []


async def test_a_slow_body_gets_408(upstream, gateway_for):
    cfg = base_config([upstream_model(MODEL, upstream.url)], server={"body_timeout": 0.3})

    async def trickle():  # type: ignore[no-untyped-def]
        yield b'{"model": "v/m", '
        await asyncio.sleep(2)
        yield b'"prompt": "hi"}'

    async with gateway_for(cfg) as client:
        r = await client.post("/v1/completions", content=trickle())
    assert r.status_code == 408 and r.json()["error"]["param"] == "body"


async def test_admin_key_lookups_during_a_store_outage_are_503_not_401(gateway_for):
    cfg = base_config([], store={"url": "redis://127.0.0.1:1/0", "timeout": 0.2})
    async with gateway_for(cfg) as client:
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi"},
                              headers={"authorization": "Bearer sk-made-by-admin"})
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert "sk-made-by-admin" not in r.text


async def test_unknown_paths_and_methods_still_get_request_ids(upstream, gateway_for):
    async with gateway_for(base_config([upstream_model(MODEL, upstream.url)])) as client:
        r = await client.get("/v1/completions")
    assert r.status_code == 405 and r.headers["x-request-id"]
    assert isinstance(r.json()["error"]["message"], str)




async def test_wildcard_callers_cannot_mint_usage_fields(upstream, gateway_for):
    cfg = base_config([{"name": "v/*", "deployments": [{"name": "d1", "base_url": upstream.url}]}])
    async with gateway_for(cfg) as client:
        for i in range(30):
            r = await client.post("/v1/completions", json={"model": f"v/name-{i}", "prompt": "hi",
                                                           "max_tokens": 1})
            assert r.status_code == 200, r.text
        await client.app.state.gateway.drain()  # type: ignore[attr-defined]
        usage = await client.get("/admin/usage", params={"group_by": "model"},
                                 headers={"authorization": f"Bearer {MASTER}"})
    assert [row["model"] for row in usage.json()["data"]] == ["v/*"]
    assert usage.json()["data"][0]["requests"] == 30


async def test_a_finished_request_leaves_nothing_for_the_garbage_collector(upstream, gateway_for):
    """A request's objects go when it ends (reference counting), none in a cycle, answered or
    refused: the exchange sat in its scope's extensions while the scope sat on the exchange, and
    a refusal's error (kept on the context) held its traceback, whose frames hold the context. So
    each request left its exchange, scope, headers, task or context for the collector, whose runs
    grew with the load."""
    cfg = base_config([upstream_model(MODEL, upstream.url)])
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

    async def each() -> list[int]:
        out = [(await client.post("/v1/chat/completions", json={**body, "stream": s})).status_code
               for s in (False, True)]
        out.append((await client.post("/v1/chat/completions", json=body,
                                      headers={"authorization": "Bearer sk-nobody"})).status_code)
        out.append((await client.post("/v1/chat/completions", json={**body, "max_tokens": "x"})).status_code)
        upstream.script.append(Behaviour(status=400))  # the upstream's own refusal (not retried)
        out.append((await client.post("/v1/chat/completions", json=body)).status_code)
        return out

    async with gateway_for(cfg) as client:
        assert await each() == [200, 200, 401, 400, 400]  # (the first of each warms what is made once)
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept to be looked at
        try:
            for _ in range(3):
                await each()
            await client.app.state.gateway.drain()  # type: ignore[attr-defined]
            gc.collect()
            left = {type(o).__qualname__ for o in gc.garbage}
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert not left & {"Exchange", "Disconnect", "Task", "RequestContext", "AsgiResponder", "traceback"}, left
