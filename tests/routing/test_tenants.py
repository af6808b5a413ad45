"""One tenant cannot take a model from everyone: requests whose content makes the upstream fail
never cool down a group's last deployments, and failures a caller's content causes never count
against a deployment. Two keys of two teams on one upstream deployment, through the real gateway."""

from __future__ import annotations

import json
from typing import Any

import pytest

from switchyard.routing import Router
from switchyard.routing.health import CLOSED
from tests.gateway.conftest import KEY, serve
from tests.providers.test_h1 import raw_server
from tests.providers.wire import completion, error, json_answer
from tests.routing.conftest import config, dep, group

OTHER = "sk-tenant-b"
TENANTS: dict[str, Any] = {"teams": [{"name": "t"}, {"name": "u"}],
                           "keys": [{"id": "a", "team": "t", "key": KEY},
                                    {"id": "b", "team": "u", "key": OTHER}]}


def poisoned_by(status: int):  # type: ignore[no-untyped-def]
    """An upstream that fails with ``status`` whenever the prompt says "poison"."""
    def answer(n: int, request: bytes) -> bytes:
        if b"poison" in request:
            return error("cannot process this", status)
        return json_answer(completion("fine"))
    return answer


def req(prompt: str) -> dict[str, Any]:
    return {"model": "m/x", "prompt": prompt, "max_tokens": 2}


async def test_one_tenants_poisonous_requests_never_make_the_model_fail_for_another():
    async with raw_server(poisoned_by(503)) as (port, conns):
        router = Router(config(group("m/x", dep("only", f"http://127.0.0.1:{port}/v1")),
                               logging={"access": True}, **TENANTS))
        breaker = router.resolve("m/x").targets[0].health.breaker
        async with serve(router.config, router=router) as client:
            for _ in range(4):  # each retried (503 is retryable) and each a deployment failure
                bad = await client.post("/v1/completions", json=req("poison"))
                assert bad.status_code == 503
            assert breaker.state != CLOSED  # the breaker did open ...
            sent = len(conns)
            for _ in range(5):  # ... yet tenant B is served, every time
                good = await client.post("/v1/completions", json=req("hello"),
                                         headers={"authorization": f"Bearer {OTHER}"})
                assert good.status_code == 200, good.text
                assert good.json()["choices"][0]["text"] == "fine"
                assert good.headers["x-switchyard-attempts"] == "1"
    assert len(conns) == sent + 5
    assert breaker.state == CLOSED  # B's success closed it again


async def test_each_poisonous_request_counts_once_against_the_deployment():
    async with raw_server(poisoned_by(500)) as (port, conns):
        router = Router(config(group("m/x", dep("only", f"http://127.0.0.1:{port}/v1")),
                               router={"cooldown_failures": 3}, **TENANTS))
        breaker = router.resolve("m/x").targets[0].health.breaker
        async with serve(router.config, router=router) as client:
            bad = await client.post("/v1/completions", json=req("poison"))
    assert bad.status_code == 502 and bad.headers["x-switchyard-attempts"] == "3" and len(conns) == 3
    assert breaker.failures == 1 and breaker.state == CLOSED  # three attempts, one request


async def test_a_poisoned_group_of_two_still_serves_the_other_tenant():
    async with raw_server(poisoned_by(502)) as (p1, _), raw_server(poisoned_by(502)) as (p2, _):
        router = Router(config(group("m/x", dep("a", f"http://127.0.0.1:{p1}/v1"),
                                     dep("b", f"http://127.0.0.1:{p2}/v1")),
                               router={"cooldown_failures": 1}, **TENANTS))
        async with serve(router.config, router=router) as client:
            for _ in range(3):
                assert (await client.post("/v1/completions", json=req("poison"))).status_code == 502
            assert all(t.health.breaker.state != CLOSED for t in router.resolve("m/x").targets)
            good = await client.post("/v1/completions", json=req("hello"),
                                     headers={"authorization": f"Bearer {OTHER}"})
    assert good.status_code == 200, good.text


@pytest.mark.parametrize("status", [400, 404, 413, 422])
async def test_failures_the_callers_content_causes_never_count(status):
    async with raw_server(poisoned_by(status)) as (port, conns):
        router = Router(config(group("m/x", dep("only", f"http://127.0.0.1:{port}/v1")),
                               router={"cooldown_failures": 1}, **TENANTS))
        breaker = router.resolve("m/x").targets[0].health.breaker
        async with serve(router.config, router=router) as client:
            for _ in range(5):
                bad = await client.post("/v1/completions", json=req("poison"))
                assert bad.status_code == status
            good = await client.post("/v1/completions", json=req("hello"),
                                     headers={"authorization": f"Bearer {OTHER}"})
    assert good.status_code == 200
    assert len(conns) == 6 and breaker.failures == 0 and breaker.state == CLOSED


async def test_gateway_refusals_never_count_nor_reach_the_upstream():
    async with raw_server(poisoned_by(503)) as (port, conns):
        router = Router(config(group("m/x", dep("only", f"http://127.0.0.1:{port}/v1"), context_window=64),
                               router={"cooldown_failures": 1}, **TENANTS))
        breaker = router.resolve("m/x").targets[0].health.breaker
        async with serve(router.config, router=router) as client:
            overflow = await client.post("/v1/completions", json={**req("word " * 200), "max_tokens": 8})
            refused = await client.post("/v1/completions", json={**req("x"), "mirostat": 2})
            good = await client.post("/v1/completions", json=req("hello"),
                                     headers={"authorization": f"Bearer {OTHER}"})
    assert overflow.status_code == 400 and "context window" in overflow.text  # the openai shape
    assert refused.status_code == 400 and "mirostat" in refused.text
    assert good.status_code == 200 and len(conns) == 1
    assert breaker.failures == 0 and breaker.state == CLOSED
    assert router.resolve("m/x").targets[0].health.inflight == 0


async def test_a_healthy_sibling_still_takes_the_load_off_a_failing_deployment():
    async with raw_server(lambda n, _: error("down", 503)) as (p1, bad), \
            raw_server(lambda n, _: json_answer(completion("fine"))) as (p2, good):
        router = Router(config(group("m/x", dep("sick", f"http://127.0.0.1:{p1}/v1", weight=1000),
                                     dep("well", f"http://127.0.0.1:{p2}/v1", weight=0.001)),
                               router={"cooldown_failures": 1}, **TENANTS))
        async with serve(router.config, router=router) as client:
            for _ in range(5):
                r = await client.post("/v1/completions", json=req("hello"))
                assert r.status_code == 200 and r.headers["x-switchyard-deployment"] == "m/x/well"
    assert len(bad) == 1 and len(good) == 5  # the open breaker shed "sick" while "well" is healthy


async def test_a_callers_request_id_stays_the_callers(capsys):
    """Two tenants sending the same x-request-id are each told their own id back, while the shared
    upstream sees ids of the gateway's, unique per attempt; the access line names both."""
    ids: list[str] = []

    def answer(n: int, request: bytes) -> bytes:
        ids.append(next(line.split(b":", 1)[1].strip().decode() for line in request.split(b"\r\n")
                        if line.lower().startswith(b"x-request-id:")))
        return error("busy", 503) if n == 1 else json_answer(completion("fine"))

    async with raw_server(answer) as (port, _):
        router = Router(config(group("m/x", dep("only", f"http://127.0.0.1:{port}/v1")),
                               logging={"access": True}, **TENANTS))
        async with serve(router.config, router=router) as client:
            got = [await client.post("/v1/completions", json=req("hello"),
                                     headers={"authorization": f"Bearer {key}", "x-request-id": "same-id"})
                   for key in (KEY, OTHER)]
    assert [r.status_code for r in got] == [200, 200]
    assert [r.headers["x-request-id"] for r in got] == ["same-id", "same-id"]
    assert got[0].headers["x-switchyard-attempts"] == "2"
    # Attempts 1 and 2 of the first request, then the second request: three distinct ids.
    assert len(ids) == 3 and len(set(ids)) == 3 and "same-id" not in ids
    assert ids[1] == f"{ids[0]}-2"
    lines = capsys.readouterr().err.splitlines()
    access = [json.loads(line) for line in lines if '"event":"request"' in line]
    assert [(a["request_id"], a["upstream_request_id"]) for a in access] == [
        ("same-id", ids[0]), ("same-id", ids[2])]
