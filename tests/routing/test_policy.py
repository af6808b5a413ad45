"""The retry policy, declared on the error: which upstream failures are retried (before the first
byte) and which count against the deployment. Through a real gateway and real loopback upstreams."""

from __future__ import annotations

import pytest

from switchyard.core.errors import UpstreamError
from switchyard.routing import Router
from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import serve
from tests.providers.test_h1 import raw_server
from tests.providers.wire import completion as answer_json
from tests.providers.wire import json_answer
from tests.routing.conftest import completion, config, dep, group

RETRIED = [408, 429, 500, 502, 503, 504]
NEVER = [400, 401, 403, 404, 413, 422, 501]


@pytest.mark.parametrize("status", RETRIED)
async def test_retried_statuses_are_retried_and_counted(upstreams, status):
    up = upstreams[0]
    up.script.append(Behaviour(status=status))  # then the default: 200
    router = Router(config(group("m/x", dep("only", up.url))))
    breaker = router.resolve("m/x").targets[0].health.breaker
    async with serve(router.config, router=router) as client:
        r = await client.post("/v1/completions", json=completion("m/x"))
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-attempts"] == "2" and len(up.requests) == 2
    assert breaker.failures == 0  # the success that followed reset the streak


@pytest.mark.parametrize("status", NEVER)
async def test_caller_and_credential_failures_are_never_retried(upstreams, status):
    a, b = upstreams[0], upstreams[1]
    a.default = b.default = Behaviour(status=status, error="no")
    router = Router(config(group("m/x", dep("a", a.url), dep("b", b.url))))
    async with serve(router.config, router=router) as client:
        r = await client.post("/v1/completions", json=completion("m/x"))
    assert r.status_code == (502 if status in (401, 403, 501) else status), r.text
    assert r.headers["x-switchyard-attempts"] == "1"
    assert len(a.requests) + len(b.requests) == 1  # no retry, no other deployment
    failures = sum(t.health.breaker.failures for t in router.resolve("m/x").targets)
    # Blamed on the deployment only when the gateway's own credentials were refused.
    assert failures == (1 if status in (401, 403) else 0)


async def test_501_is_not_retried_nor_held_against_the_deployment(upstreams):
    up = upstreams[0]
    up.default = Behaviour(status=501, error="logprobs are not implemented")
    router = Router(config(group("m/x", dep("only", up.url)), router={"cooldown_failures": 1}))
    async with serve(router.config, router=router) as client:
        for _ in range(3):
            r = await client.post("/v1/completions", json=completion("m/x"))
            assert r.status_code == 502 and "HTTP 501: logprobs are not implemented" in r.text
        up.default = Behaviour()
        ok = await client.post("/v1/completions", json=completion("m/x"))
    assert ok.status_code == 200 and len(up.requests) == 4
    assert router.resolve("m/x").targets[0].health.breaker.failures == 0


async def test_a_reset_before_any_byte_is_retried():
    # Request 1: the upstream reads it and hangs up without a word (a new connection: the
    # transport does not resend it itself). Request 2: answered.
    async with raw_server(lambda n, _: None if n == 1 else json_answer(answer_json())) as (port, conns):
        router = Router(config(group("m/x", dep("only", f"http://127.0.0.1:{port}/v1"))))
        async with serve(router.config, router=router) as client:
            r = await client.post("/v1/completions", json=completion("m/x"))
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-attempts"] == "2" and len(conns) == 2


async def test_a_pooled_connection_the_upstream_closed_is_no_failure():
    # The upstream keeps the first connection alive, then hangs up on the next request sent on it
    # (as a server closing an idle connection just as we reuse it): the transport resends it once
    # on a new connection; the router sees one clean attempt and the breaker nothing.
    def answer(n: int, _: bytes) -> bytes | None:
        return None if n == 2 else json_answer(answer_json(f"answer {n}"))

    async with raw_server(answer) as (port, conns):
        router = Router(config(group("m/x", dep("only", f"http://127.0.0.1:{port}/v1")),
                               router={"cooldown_failures": 1}))
        async with serve(router.config, router=router) as client:
            first = await client.post("/v1/completions", json=completion("m/x"))
            second = await client.post("/v1/completions", json=completion("m/x"))
    assert first.status_code == second.status_code == 200, second.text
    assert second.json()["choices"][0]["text"] == "answer 3"
    assert second.headers["x-switchyard-attempts"] == "1"
    assert conns == [1, 1, 2]
    assert router.resolve("m/x").targets[0].health.breaker.failures == 0


def test_the_policy_table():
    """``UpstreamError.from_status`` is the one place that decides."""
    def of(status: int) -> tuple[int, bool, bool]:
        e = UpstreamError.from_status("d1", status, "said", retry_after=3)
        return e.status, e.retryable, e.deployment_fault

    # The caller sees 502 for any upstream server error but 503 and 504, which keep their meaning.
    assert [of(s) for s in RETRIED] == [(502 if s in (500, 502) else s, True, True) for s in RETRIED]
    assert [of(s) for s in (400, 404, 409, 413, 422)] == [(s, False, False)
                                                         for s in (400, 404, 409, 413, 422)]
    assert of(501) == (502, False, False)  # a feature the upstream lacks: not its health
    assert [of(s) for s in (401, 403, 407)] == [(502, False, True)] * 3
    assert of(505) == (502, False, True)
    assert UpstreamError.from_status("d1", 429, None, retry_after=3).retry_after == 3
    assert UpstreamError.from_status("d1", 500, None, retry_after=3).retry_after is None
    assert UpstreamError.timed_out("d1", callers_deadline=True).deployment_fault is False
    assert UpstreamError.timed_out("d1", callers_deadline=False).deployment_fault is True
