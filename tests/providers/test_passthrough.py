"""What callers pass through to upstreams (SGP inference_extra_headers / inference_extra_params,
vendor fields), through the HTTP surface with two tenants on one upstream deployment: one tenant's
bytes never reach another's connection, answers or bill."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.gateway.conftest import KEY, base_config
from tests.providers.test_h1 import ok, raw_server

OTHER = "sk-other-tenant"
MODEL = "v/m"


def two_tenants(url: str, **dep: Any):  # type: ignore[no-untyped-def]
    return base_config(
        [{"name": MODEL, "deployments": [{"name": "d1", "dialect": "openai", "base_url": url,
                                          "api_key": "sk-upstream-secret", **dep}]}],
        teams=[{"name": "t"}, {"name": "u"}],
        keys=[{"id": "k1", "team": "t", "key": KEY}, {"id": "k2", "team": "u", "key": OTHER}])


def sgp(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": "hi", "max_new_tokens": 2, **fields}


SMUGGLE = ("a\r\nauthorization: Bearer stolen\r\ncontent-length: 0\r\n\r\nPOST /v1/completions HTTP/1.1\r\n"
           "host: up\r\ncontent-length: 60\r\n\r\n")


@pytest.mark.parametrize(("headers", "blamed"), [
    ({"X-Foo": SMUGGLE}, "inference_extra_headers.X-Foo"),
    ({"X-Foo": "nul\x00"}, "inference_extra_headers.X-Foo"),
    ({"X-Foo": "caf\u00e9 \u2603"}, "inference_extra_headers.X-Foo"),
    ({"X-Foo": 5}, "inference_extra_headers.X-Foo"),
    ({"X Foo": "v"}, "inference_extra_headers.X Foo"),
    ({"x-a\r\nhost": "v"}, "inference_extra_headers.x-a\\r\\nhost"),
    ({"Authorization": "Bearer mine"}, "inference_extra_headers.Authorization"),
    ({"x-api-key": "k"}, "inference_extra_headers.x-api-key"),
    ({"Host": "evil"}, "inference_extra_headers.Host"),
    ({"Content-Length": "0"}, "inference_extra_headers.Content-Length"),
    ({"Transfer-Encoding": "chunked"}, "inference_extra_headers.Transfer-Encoding"),
    ({"Connection": "close"}, "inference_extra_headers.Connection"),
    ({"Proxy-Authorization": "x"}, "inference_extra_headers.Proxy-Authorization"),
    ({"Cookie": "a=b"}, "inference_extra_headers.Cookie"),
])
async def test_unsafe_extra_headers_are_400s_and_nothing_is_sent(upstream, gateway_for, headers, blamed):
    cfg = two_tenants(upstream.url, allow_extra_headers=["*"])
    async with gateway_for(cfg) as client:
        r = await client.post("/v4/beta/completions", json=sgp(inference_extra_headers=headers))
        assert r.status_code == 422, r.text  # SGP's validation shape
        assert r.json()["detail"][0]["loc"] == ["body", *blamed.split(".", 1)]
        assert upstream.requests == []
        theirs = await client.post("/v4/beta/completions", json=sgp(),
                                   headers={"authorization": f"Bearer {OTHER}"})
    assert theirs.status_code == 200 and len(upstream.requests) == 1
    assert "authorization" not in {k.lower() for k in upstream.requests[0].headers} - {"authorization"}
    assert upstream.requests[0].headers["Authorization"] == "Bearer sk-upstream-secret"


async def test_only_allowed_headers_pass_and_never_over_the_deployments_own(upstream, gateway_for):
    cfg = two_tenants(upstream.url, allow_extra_headers=["X-Trace", "X-Custom-Auth"],
                      headers={"X-Custom-Auth": "deployment-secret"})
    async with gateway_for(cfg) as client:
        fine = await client.post("/v4/beta/completions", json=sgp(inference_extra_headers={"x-trace": "t1"}))
        other = await client.post("/v4/beta/completions", json=sgp(inference_extra_headers={"x-other": "1"}))
        own = await client.post("/v4/beta/completions",
                                json=sgp(inference_extra_headers={"X-Custom-Auth": "mine"}))
    assert fine.status_code == 200, fine.text
    assert upstream.requests[0].headers["x-trace"] == "t1"  # names go lower-case
    assert other.status_code == 422 and "allow_extra_headers" in other.text
    assert own.status_code == 422 and "sets this header itself" in own.text
    assert len(upstream.requests) == 1
    assert upstream.requests[0].headers["X-Custom-Auth"] == "deployment-secret"


@pytest.mark.parametrize("field", ["model", "max_tokens", "max_new_tokens", "max_completion_tokens", "n",
                                   "best_of", "stream", "logprobs", "prompt", "messages", "echo",
                                   "n_predict", "stream_options"])
async def test_extra_params_never_set_what_the_gateway_owns(upstream, gateway_for, field):
    async with gateway_for(two_tenants(upstream.url, allow_extra_params=["*"])) as client:
        r = await client.post("/v4/beta/completions", json=sgp(inference_extra_params={field: 4000}))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "inference_extra_params", field]
    assert upstream.requests == []


async def test_allowed_extra_params_pass_and_others_are_refused(upstream, gateway_for):
    async with gateway_for(two_tenants(upstream.url, allow_extra_params=["priority"])) as client:
        fine = await client.post("/v4/beta/completions", json=sgp(inference_extra_params={"priority": 3}))
        other = await client.post("/v4/beta/completions", json=sgp(inference_extra_params={"top_a": 3}))
    assert fine.status_code == 200, fine.text
    assert upstream.requests[0].body["priority"] == 3 and upstream.requests[0].body["max_tokens"] == 2
    assert other.status_code == 422 and "allow_extra_params" in other.text
    assert len(upstream.requests) == 1


async def test_nothing_passes_by_default(upstream, gateway_for):
    async with gateway_for(two_tenants(upstream.url)) as client:
        h = await client.post("/v4/beta/completions", json=sgp(inference_extra_headers={"x-trace": "1"}))
        p = await client.post("/v4/beta/completions", json=sgp(inference_extra_params={"priority": 1}))
        v = await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 1,
                                                       "vendor_knob": 1})
    assert h.status_code == 422 and p.status_code == 422
    assert v.status_code == 200 and "vendor_knob" in v.headers["x-switchyard-warning"]
    assert [("vendor_knob" in s.body) for s in upstream.requests] == [False]


async def test_an_upstream_answering_twice_cannot_feed_another_tenant(gateway_for):
    """Whatever happens upstream (a smuggled request, a broken server), a connection that brings
    bytes nobody asked for is never handed to the next caller."""
    def answer(n: int, request: bytes) -> bytes:
        text = json.dumps({"choices": [{"index": 0, "text": f"answer {n}", "finish_reason": "stop"}]})
        out = ok(text.encode(), b"content-type: application/json\r\n")
        if n == 1:  # and a second answer nobody asked for, in the same write
            stolen = {"choices": [{"index": 0, "text": "STOLEN", "finish_reason": "stop"}]}
            out += ok(json.dumps(stolen).encode())
        return out

    body = {"model": MODEL, "prompt": "a", "max_tokens": 1}
    async with raw_server(answer) as (port, conns), \
            gateway_for(two_tenants(f"http://127.0.0.1:{port}/v1")) as client:
        first = await client.post("/v1/completions", json=body)
        await asyncio.sleep(0.05)
        second = await client.post("/v1/completions", json=body, headers={"authorization": f"Bearer {OTHER}"})
    assert first.json()["choices"][0]["text"] == "answer 1"
    assert second.json()["choices"][0]["text"] == "answer 2"
    assert conns == [1, 2]
