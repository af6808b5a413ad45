"""Retries, cooldowns and deadlines through the real gateway and real failing upstreams."""

from __future__ import annotations

import json

from switchyard.routing import Router
from switchyard.routing.health import CLOSED, OPEN
from tests.fakes.upstream import Behaviour, refused_url
from tests.gateway.conftest import serve
from tests.providers.test_h1 import RESET, raw_server
from tests.providers.wire import completion as completion_answer
from tests.providers.wire import json_answer
from tests.routing.conftest import completion, config, dep, group, records


async def test_refused_connection_moves_to_another_deployment(upstreams):
    up = upstreams[0]
    cfg = config(group("m/x", dep("dead", refused_url(), weight=1000), dep("live", up.url, weight=0.001)))
    async with serve(cfg) as client:
        r = await client.post("/v1/completions", json=completion("m/x"))
        recs = await records(client)
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-deployment"] == "m/x/live"
    assert r.headers["x-switchyard-attempts"] == "2"
    assert len(up.requests) == 1
    assert [(x.deployment, x.status, x.completion_tokens) for x in recs] == [("m/x/live", 200, 3)]


async def test_5xx_is_retried_on_the_same_deployment_with_backoff(upstreams):
    up = upstreams[0]
    up.script += [Behaviour(status=500), Behaviour(status=503)]
    async with serve(config(group("m/x", dep("only", up.url)))) as client:
        r = await client.post("/v1/completions", json=completion("m/x"))
        recs = await records(client)
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-attempts"] == "3"
    assert len(up.requests) == 3
    assert len(recs) == 1 and recs[0].completion_tokens == 3  # failed attempts produced nothing


async def test_retries_run_out_and_the_last_error_passes_through(upstreams):
    up = upstreams[0]
    up.default = Behaviour(status=502)
    async with serve(config(group("m/x", dep("only", up.url)), router={"retries": 1})) as client:
        r = await client.post("/v1/completions", json=completion("m/x"))
    assert r.status_code == 502
    assert r.headers["x-switchyard-attempts"] == "2"
    assert len(up.requests) == 2


async def test_caller_errors_are_not_retried(upstreams):
    a, b = upstreams[0], upstreams[1]
    a.script.append(Behaviour(status=400, error="bad prompt"))
    b.script.append(Behaviour(status=400, error="bad prompt"))
    async with serve(config(group("m/x", dep("a", a.url), dep("b", b.url)))) as client:
        r = await client.post("/v1/completions", json=completion("m/x"))
    assert r.status_code == 400
    assert "bad prompt" in r.json()["error"]["message"]
    assert len(a.requests) + len(b.requests) == 1


async def test_429_with_short_retry_after_is_honoured(upstreams):
    up = upstreams[0]
    up.script.append(Behaviour(status=429, retry_after=0.05))
    cfg = config(group("m/x", dep("only", up.url)), keys=[{"id": "k1", "team": "t", "key": "sk-test-key",
                                                            "timeout": 5}])
    async with serve(cfg) as client:
        r = await client.post("/v1/completions", json=completion("m/x"))
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-attempts"] == "2"
    assert len(up.requests) == 2


async def test_429_with_retry_after_beyond_the_deadline_passes_through(upstreams):
    up = upstreams[0]
    up.script.append(Behaviour(status=429, retry_after=30))
    cfg = config(group("m/x", dep("only", up.url)), keys=[{"id": "k1", "team": "t", "key": "sk-test-key",
                                                            "timeout": 2}])
    async with serve(cfg) as client:
        r = await client.post("/v1/completions", json=completion("m/x"))
        again = await client.post("/v1/completions", json=completion("m/x"))
    assert r.status_code == 429
    assert int(r.headers["retry-after"]) >= 29
    # The request does not wait 30 s for its retry; but the next request is sent: a group's last
    # deployment is never taken out of rotation (the upstream answers for itself).
    assert again.status_code == 200, again.text
    assert len(up.requests) == 2


async def test_stream_cut_mid_way_is_never_retried(upstreams):
    a, b = upstreams[0], upstreams[1]
    a.default = b.default = Behaviour(cut_after=2)
    async with serve(config(group("m/x", dep("a", a.url), dep("b", b.url)))) as client:
        r = await client.post("/v1/completions", json=completion("m/x", max_tokens=6, stream=True))
        recs = await records(client)
    assert r.status_code == 200  # the first bytes were already out
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    texts = [json.loads(e)["choices"][0]["text"] for e in events if e != "[DONE]" and "choices" in e
             and json.loads(e)["choices"]]
    assert "".join(texts) == "w0 w1"
    assert "error" in events[-2] or "error" in events[-1]
    assert len(a.requests) + len(b.requests) == 1
    assert a.cut + b.cut == 1
    assert len(recs) == 1 and recs[0].status == 502 and recs[0].completion_tokens == 2


async def test_failure_before_the_first_chunk_of_a_stream_is_retried(upstreams):
    a, b = upstreams[0], upstreams[1]
    a.default = Behaviour(status=503)
    cfg = config(group("m/x", dep("a", a.url, weight=1000), dep("b", b.url, weight=0.001)))
    async with serve(cfg) as client:
        r = await client.post("/v1/completions", json=completion("m/x", stream=True))
        recs = await records(client)
    assert r.status_code == 200
    assert r.headers["x-switchyard-deployment"] == "m/x/b"
    assert r.headers["x-switchyard-attempts"] == "2"
    assert len(recs) == 1 and recs[0].deployment == "m/x/b" and recs[0].completion_tokens == 3


async def test_deadline_bounds_every_attempt_together(upstreams):
    a, b = upstreams[0], upstreams[1]
    a.default = b.default = Behaviour(stall=1)
    cfg = config(group("m/x", dep("a", a.url), dep("b", b.url)))
    async with serve(cfg) as client:
        r = await client.post("/v4/beta/completions", headers={"x-api-key": "sk-test-key"},
                              json={"model": "m/x", "prompt": "hi", "max_new_tokens": 2,
                                    "inference_timeout": 0.3})
    assert r.status_code == 504, r.text
    assert len(a.requests) + len(b.requests) == 1  # the one attempt used the whole budget


async def test_failing_deployment_cools_down_then_probes(upstreams):
    a, b = upstreams[0], upstreams[1]
    a.default = Behaviour(status=500)
    router = Router(config(group("m/x", dep("a", a.url), dep("b", b.url), strategy="least_busy"),
                           router={"cooldown_failures": 2}))
    health = router.resolve("m/x/a").targets[0].health
    async with serve(router.config, router=router) as client:
        for _ in range(60):  # ties between idle deployments are broken at random: until a was tried twice
            r = await client.post("/v1/completions", json=completion("m/x"))
            assert r.status_code == 200  # a's failures were retried on b
            if len(a.requests) == 2:
                break
        for _ in range(8):
            r = await client.post("/v1/completions", json=completion("m/x"))
            assert r.status_code == 200
        assert len(a.requests) == 2  # two failures opened a's circuit; b served the rest
        health.breaker.until = 0.0  # the cooldown is over (moving the clock, not sleeping)
        a.default = Behaviour()
        r = await client.post("/v1/completions", json=completion("m/x/a"))
        assert r.status_code == 200 and len(a.requests) == 3  # the probe succeeded
        assert health.breaker.state == 0


async def test_failing_deployments_stay_in_rotation_and_each_request_counts_once(upstreams):
    a, b = upstreams[0], upstreams[1]
    a.default = b.default = Behaviour(status=500)
    router = Router(config(group("m/x", dep("a", a.url), dep("b", b.url)),
                           router={"retries": 3, "cooldown_failures": 2, "cooldown_seconds": 20}))
    breakers = [router.resolve(f"m/x/{n}").targets[0].health.breaker for n in "ab"]
    async with serve(router.config, router=router) as client:
        first = await client.post("/v1/completions", json=completion("m/x"))
        assert first.status_code == 502 and first.headers["x-switchyard-attempts"] == "4"
        assert [br.failures for br in breakers] == [1, 1]  # 4 attempts, each deployment blamed once
        await client.post("/v1/completions", json=completion("m/x"))
        assert [br.state for br in breakers] == [OPEN, OPEN]
        sent = len(a.requests) + len(b.requests)
        a.default = b.default = Behaviour()  # both recover while their breakers are open
        r = await client.post("/v1/completions", json=completion("m/x"))
    # Never "every deployment is cooling down": with no healthy deployment, the open ones are tried.
    assert r.status_code == 200, r.text
    assert len(a.requests) + len(b.requests) == sent + 1
    assert CLOSED in [br.state for br in breakers]


async def test_a_reset_before_the_first_byte_is_retried_by_the_router_alone():
    """One retry policy: an RST on a pooled connection is not resent by the transport and then
    retried by the router on top. The upstream sees exactly as many POSTs as the attempts the
    caller is told of."""
    answers = lambda n, _: json_answer(completion_answer("warm")) if n == 1 else RESET  # noqa: E731
    async with raw_server(answers) as (port, conns):
        cfg = config(group("m/x", dep("only", f"http://127.0.0.1:{port}/v1")))
        async with serve(cfg) as client:
            warm = await client.post("/v1/completions", json=completion("m/x"))  # pools a connection
            r = await client.post("/v1/completions", json=completion("m/x"))
    assert warm.status_code == 200
    assert r.status_code == 502 and r.headers["x-switchyard-attempts"] == "3", r.text
    assert len(conns) == 1 + 3
