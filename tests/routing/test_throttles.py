"""Throttles retried as the vendors' SDKs would: a model with one deployment that answers a
retryable failure before the first byte (Bedrock's ThrottlingException, a 429, Anthropic's 529, a
503) is tried again on that deployment after a jittered exponential backoff, within the request's
deadline and at most the router's attempt count; ``x-switchyard-attempts`` counts the attempts. A
Retry-After longer than the request's deadline returns the 429 at once. Real fakes throughout."""

from __future__ import annotations

import time
from typing import Any

from tests.fakes import bedrock as aws
from tests.fakes.anthropic import Claude, FakeAnthropic
from tests.fakes.bedrock import FakeBedrock
from tests.fakes.bedrock import Reply as AwsReply
from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import KEY, base_config, serve
from tests.routing.conftest import completion, dep, group

HI = [{"role": "user", "content": "hi"}]
# The router's defaults (backoff_base 0.05 s, backoff_max 2 s, 3 failures open a breaker for 30 s),
# but for retries, which some tests set.


def config(*models: dict[str, Any], router: dict[str, Any] | None = None, **extra: Any) -> Any:
    return base_config(list(models), router=router or {}, **extra)


async def _burst(client: Any, n: int, **body: Any) -> list[Any]:
    """``n`` requests one after another (a burst of throttled callers opens the breaker)."""
    return [await client.post("/v1/completions", json=completion("m/x", **body)) for _ in range(n)]


def _bedrock(url: str) -> dict[str, Any]:
    return {"name": "b1", "backend": "upstream", "provider": "bedrock", "base_url": url, "region": aws.REGION,
            "model": "anthropic.claude-3-5-sonnet-20240620-v1:0", "aws_access_key_id": aws.ACCESS_KEY,
            "aws_secret_access_key": aws.SECRET_KEY}


async def test_bedrock_throttling_on_the_only_deployment_is_retried() -> None:
    """boto3's standard mode retries a ThrottlingException with backoff, however many callers
    were throttled before: so does the gateway, after a burst opened the deployment's breaker."""
    body = {"model": "aws/claude", "messages": HI}
    async with FakeBedrock() as fake, serve(config(group("aws/claude", _bedrock(fake.url)))) as client:
        fake.script += [AwsReply(error="ThrottlingException")] * 9
        burst = [await client.post("/v1/chat/completions", json=body) for _ in range(3)]
        fake.script.append(AwsReply(error="ThrottlingException"))
        sent = len(fake.requests)
        r = await client.post("/v1/chat/completions", json=body)
    assert [b.status_code for b in burst] == [429, 429, 429]
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "Hello from Bedrock"
    assert r.headers["x-switchyard-attempts"] == "2" and len(fake.requests) - sent == 2


async def test_a_429_with_a_short_retry_after_on_the_only_deployment_is_retried(upstreams) -> None:
    """The openai SDK waits out a Retry-After of a few seconds and tries again."""
    up = upstreams[0]
    up.script.append(Behaviour(status=429, error="slow down", retry_after=3))
    async with serve(config(group("m/x", dep("only", up.url)))) as client:
        t0 = time.monotonic()
        r = await client.post("/v1/completions", json=completion("m/x"))
        took = time.monotonic() - t0
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-attempts"] == "2" and len(up.requests) == 2
    assert took >= 3  # it waited what the upstream asked


async def test_a_429_without_retry_after_is_retried_after_a_burst(upstreams) -> None:
    up = upstreams[0]
    async with serve(config(group("m/x", dep("only", up.url)))) as client:
        up.script += [Behaviour(status=429, error="slow down")] * 9
        burst = await _burst(client, 3)  # three callers, each throttled three times: breaker open
        up.script.append(Behaviour(status=429, error="slow down"))
        sent = len(up.requests)
        r = await client.post("/v1/completions", json=completion("m/x"))
    assert [b.status_code for b in burst] == [429, 429, 429]
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-attempts"] == "2" and len(up.requests) - sent == 2


async def test_anthropic_529_on_the_only_deployment_is_retried() -> None:
    """The anthropic SDK retries an overloaded 529 with backoff; after a burst, so does the gateway."""
    async with FakeAnthropic() as up:
        d = {"name": "c1", "provider": "anthropic", "base_url": up.url, "api_key": up.key,
             "model": "claude-up"}
        body = {"model": "a/claude", "max_tokens": 10, "messages": HI}
        async with serve(config(group("a/claude", d))) as client:
            up.script += [Claude(status=529, error="Overloaded")] * 9
            burst = [await client.post("/v1/messages", json=body) for _ in range(3)]
            up.script.append(Claude(status=529, error="Overloaded"))
            sent = len(up.requests)
            r = await client.post("/v1/messages", json=body)
    assert [b.status_code for b in burst] == [529, 529, 529]
    assert r.status_code == 200, r.text
    assert r.json()["content"][0]["text"] == "Hello from Claude"
    assert r.headers["x-switchyard-attempts"] == "2" and len(up.requests) - sent == 2


async def test_throttles_stop_at_the_routers_attempt_count(upstreams) -> None:
    up = upstreams[0]
    up.default = Behaviour(status=429, error="slow down")
    async with serve(config(group("m/x", dep("only", up.url)), router={"retries": 2})) as client:
        r = await client.post("/v1/completions", json=completion("m/x"))
    assert r.status_code == 429, r.text
    assert r.headers["x-switchyard-attempts"] == "3" and len(up.requests) == 3


async def test_a_retry_after_past_the_deadline_returns_the_429_at_once(upstreams) -> None:
    up = upstreams[0]
    up.default = Behaviour(status=429, error="slow down", retry_after=30)
    keys = [{"id": "k1", "team": "t", "key": KEY, "timeout": 5}]  # a 5 s deadline per request
    async with serve(config(group("m/x", dep("only", up.url)), keys=keys)) as client:
        t0 = time.monotonic()
        r = await client.post("/v1/completions", json=completion("m/x"))
        took = time.monotonic() - t0
    assert r.status_code == 429, r.text
    assert r.headers["x-switchyard-attempts"] == "1" and len(up.requests) == 1
    assert took < 5  # not held until the deadline
    assert r.headers["retry-after"] == "30"
