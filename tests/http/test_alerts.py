"""Budget alerts: a real webhook receiver on loopback gets each threshold of a quota once, from two
gateways sharing one Redis (the store's claim decides which sends), signed, retried after a
failure, in the JSON and the Slack shapes, never carrying a secret."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from contextlib import AsyncExitStack
from typing import Any

from aiohttp import web

from switchyard.core.config import parse_config
from switchyard.core.tasks import stop
from tests.fakes.serve import serve_app
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import KEY, MASTER, serve

SECRET = "whsec-0123456789abcdef"


class Receiver:
    """Records every POST; answers 500 to the first ``fail`` of them."""

    def __init__(self, fail: int = 0) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.fail = fail

    async def __aenter__(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        self._runner, port = await serve_app(app)
        self.url = f"http://127.0.0.1:{port}/hook"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()

    async def _hook(self, request: web.Request) -> web.Response:
        if self.fail:
            self.fail -= 1
            return web.Response(status=500)
        self.got.append((dict(request.headers), await request.read()))
        return web.Response(status=204)

    async def wait(self, n: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.got) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return [json.loads(b) for _, b in self.got]


def config(up: str, hook: str, store: str, fmt: str = "json") -> Any:
    # $1000 per 1M completion tokens, prompts free: 3 tokens cost $0.003; the team has $0.01 a day.
    return parse_config({
        "logging": {"access": False}, "master_key": MASTER, "store": {"url": store, "timeout": 2.0},
        "alerts": {"webhook": hook, "secret": SECRET, "format": fmt, "interval": 0.05},
        "models": [{"name": "openai/gpt-4o", "price": {"prompt_per_1m": 0, "completion_per_1m": 1000},
                    "deployments": [{"name": "o", "base_url": up, "model": "gpt-4o"}]}],
        "teams": [{"name": "t", "limits": {"spend_per_day": 0.01, "shrink_max_tokens": False}}],
        "keys": [{"id": "k1", "team": "t", "key": KEY}]})


async def spend(c: Any, n: int) -> None:
    for _ in range(n):
        r = await c.post("/v1/chat/completions", json={
            "model": "openai/gpt-4o", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
        assert r.status_code == 200, r.text


async def test_each_threshold_once_across_two_replicas(redis_url: str) -> None:
    import redis.asyncio as redis

    store = redis_url.rsplit("/", 1)[0] + "/15"  # a db of its own: no claims from other tests
    r = redis.from_url(store)
    await r.flushdb()
    await r.aclose()
    async with FakeUpstream() as up, Receiver(fail=1) as hook, AsyncExitStack() as stack:
        a = await stack.enter_async_context(serve(config(up.url, hook.url, store)))
        b = await stack.enter_async_context(serve(config(up.url, hook.url, store)))
        await spend(a, 1)
        await spend(b, 1)  # $0.006: 60%
        got = await hook.wait(1)
        await asyncio.sleep(0.5)  # both replicas checked many times over: still one
        assert [g["threshold"] for g in got] == [0.5]
        assert got[0] == {"type": "budget_threshold", "scope": "team t", "limit": "spend_per_day",
                          "threshold": 0.5, "used": 0.006, "limit_value": 0.01, "unit": "USD",
                          "period": time.strftime("%Y-%m-%d", time.gmtime())}
        await spend(a, 1)  # $0.009: 90%, past 0.8
        got = await hook.wait(2)
        await asyncio.sleep(0.5)
        assert [g["threshold"] for g in got] == [0.5, 0.8]
        for headers, body in hook.got:  # signed with the secret, which no body carries
            want = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            assert headers["x-switchyard-signature"] == f"sha256={want}"
            assert SECRET.encode() not in body and KEY.encode() not in body
        assert hook.fail == 0  # the first delivery failed and was retried


async def test_slack_format() -> None:
    async with FakeUpstream() as up, Receiver() as hook, serve(config(up.url, hook.url, "memory://",
                                                                      fmt="slack")) as c:
        await spend(c, 2)
        (got,) = await hook.wait(1)
        assert got["text"].startswith(":warning: team t: 50% of its spend_per_day reached for ")
        assert "(0.006 of 0.01 USD)" in got["text"]


async def test_a_soft_budget_alerts_and_never_refuses() -> None:
    async with FakeUpstream() as up, Receiver() as hook:
        cfg = config(up.url, hook.url, "memory://").model_dump()
        cfg["keys"][0]["key"] = KEY
        cfg["keys"][0]["limits"] = {"spend_per_day": 0.004, "soft": True}
        cfg["teams"][0]["limits"] = {"shrink_max_tokens": False}
        async with serve(parse_config(cfg)) as c:
            await spend(c, 3)  # $0.009: more than twice the soft budget, every request answered
            got = await hook.wait(3)
            await asyncio.sleep(0.3)
            assert sorted((g["scope"], g["threshold"]) for g in got) == [
                ("key k1", 0.5), ("key k1", 0.8), ("key k1", 1.0)]


async def test_a_decided_threshold_is_not_claimed_again_every_interval() -> None:
    async with FakeUpstream() as up, Receiver() as hook, serve(config(up.url, hook.url, "memory://")) as c:
        await spend(c, 2)  # 60%: the 0.5 threshold
        await hook.wait(1)
        alerts = c.app.state.gateway.policies.alerts  # type: ignore[attr-defined]
        await stop(alerts._task)  # checked by hand from here: no loop racing the counts
        store = alerts.store
        claims: list[str] = []
        claim = store.claim

        async def counted(name: str, ttl_ms: int) -> bool:
            claims.append(name)
            return await claim(name, ttl_ms)

        store.claim = counted
        assert await alerts.check() == 0 and await alerts.check() == 0
        assert claims == []  # decided once: not asked for again
        await spend(c, 1)  # 90%: 0.8 is new, asked for once
        assert await alerts.check() == 1 and await alerts.check() == 0
        assert len(claims) == 1 and claims[0].endswith(":0.8")
        assert [g["threshold"] for g in await hook.wait(2)] == [0.5, 0.8]
