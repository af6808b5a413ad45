"""Two gateway processes, one real Redis, bursts far over a session's and a tag's spend budgets:
the admitted spend stops exactly at each limit, across the replicas."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import free_port, start_redis, stop
from tests.fakes.upstream import FakeUpstream
from tests.policies.test_multiprocess import serving, usage_of

MAX_TOKENS = 10  # the fake answers exactly this many tokens: a request costs what it reserved
COST = MAX_TOKENS * 1000 / 1e6  # $1000 per 1M completion tokens, prompts free: $0.01 a request
PER_REPLICA = 40


def config(upstream: str, redis: str) -> dict[str, Any]:
    return {
        "master_key": "mk-0123456789abcdef",
        "store": {"url": redis, "timeout": 2.0},
        "models": [{"name": "openai/gpt-4o", "price": {"prompt_per_1m": 0, "completion_per_1m": 1000},
                    "deployments": [{"name": "up", "base_url": upstream, "model": "gpt-4o"}]}],
        "teams": [{"name": "t", "limits": {"shrink_max_tokens": False},
                   "tag_limits": {"search": {"spend_per_day": 0.17}}}],
        "keys": [{"id": "k", "team": "t", "key": "sk-k", "limits": {"spend_per_session": 0.25}}],
    }


async def burst(ports: list[int], headers: dict[str, str]) -> list[httpx.Response]:
    body = {"model": "openai/gpt-4o", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": MAX_TOKENS}
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=200)) as c:
        return await asyncio.gather(*(
            c.post(f"http://127.0.0.1:{p}/v1/chat/completions", json=body,
                   headers={"authorization": "Bearer sk-k", **headers})
            for p in ports for _ in range(PER_REPLICA)))


def admitted(rs: list[httpx.Response], scope: str) -> list[httpx.Response]:
    ok = [r for r in rs if r.status_code == 200]
    refused = [r for r in rs if r.status_code == 429]
    assert len(ok) + len(refused) == len(rs), {r.status_code for r in rs}
    assert all(r.json()["error"]["message"].startswith(f"{scope}: ") for r in refused)
    assert all(r.json()["usage"]["completion_tokens"] == MAX_TOKENS for r in ok)
    return ok


async def test_two_replicas_stop_session_and_tag_spend_exactly_at_the_limit():
    with tempfile.TemporaryDirectory() as d:
        rport = free_port()
        redis = start_redis(rport, cwd=d)
        try:
            async with FakeUpstream() as up:
                cfg = Path(d) / "gw.yaml"
                cfg.write_text(json.dumps(config(up.url, f"redis://127.0.0.1:{rport}/0")))
                ports = [free_port() for _ in range(2)]
                async with serving(cfg, ports, d):
                    # the key's $0.25 per session: exactly 25 requests of session s-1, out of 80
                    ok = admitted(await burst(ports, {"x-switchyard-session": "s-1"}), "session s-1")
                    assert len(ok) == round(0.25 / COST)
                    # the team's $0.17 a day for tag search: exactly 17 (sessions of their own)
                    ok = admitted(await burst(ports, {"x-switchyard-tags": "search"}), "tag search")
                    assert len(ok) == round(0.17 / COST)
                    total = await usage_of(ports[1], "t", 2 * 2 * PER_REPLICA)
                    assert round(total["cost_usd"], 9) == round(0.25 + 0.17, 9)
        finally:
            stop(redis)
