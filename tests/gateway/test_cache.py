"""The response cache (docs/cache.md) through real gateways sharing one real Redis, in front of
the fake upstream: a repeated request is answered by another replica without an upstream call, in
every dialect, streamed and whole; tenants never share entries; what did not end cleanly is never
kept; usage shows the hits and what they saved."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import msgspec
import pytest

from switchyard.core.config import Config
from switchyard.policies.factory import build_policies
from tests.fakes.anthropic import Claude, FakeAnthropic
from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import KEY, MASTER, base_config, serve, upstream_model

OTHER = "sk-other-team-key"
CACHE_ON = {"mode": "exact", "ttl": 60}

# (path, body, stream field): one per dialect the gateway answers in.
DIALECTS: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 4}),
    ("/inference/v1/completions", {"prompt": "hi", "max_tokens": 4}),
    ("/v4/beta/completions", {"prompt": "hi", "max_new_tokens": 4}),
    ("/v4/beta/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
    ("/v5/completions", {"prompt": "hi", "max_tokens": 4}),
    ("/v5/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
    ("/completion", {"prompt": "hi", "n_predict": 4}),
    ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 4}),
]
# What differs between two renderings of one answer: ids and clocks.
_VOLATILE = frozenset({"id", "item_id", "response_id", "created", "created_at", "system_fingerprint",
                       "generation_settings", "timings", "t_ms"})


def cache_config(url: str, redis: str, *, models: dict[str, Any] | None = None, **extra: Any) -> Config:
    model = upstream_model("v/m", url) | {"cache": CACHE_ON,
                                          "price": {"prompt_per_1m": 2.0, "completion_per_1m": 6.0}}
    return base_config([model | (models or {})], store={"url": redis, "timeout": 2.0},
                       teams=[{"name": "t"}, {"name": "u"}],
                       keys=[{"id": "k1", "team": "t", "key": KEY}, {"id": "k2", "team": "u", "key": OTHER}],
                       **extra)


@asynccontextmanager
async def replicas(config: Config, n: int = 2) -> AsyncIterator[list[httpx.AsyncClient]]:
    """``n`` gateways sharing one store namespace (as replicas do), each with its own client."""
    ns = f"c{uuid.uuid4().hex[:8]}"
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(serve(config, policies=build_policies(config, ns=ns)))
                   for _ in range(n)]
        yield clients


async def settled(*clients: httpx.AsyncClient) -> None:
    """Every request these gateways took has ended, been kept if it may be, and been settled."""
    for c in clients:
        await c.app.gateway.drain()  # type: ignore[attr-defined]


def steady(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: steady(x) for k, x in v.items() if k not in _VOLATILE}
    if isinstance(v, list):
        return [steady(x) for x in v]
    return v


def events(text: str) -> list[Any]:
    out = []
    for line in text.splitlines():
        if line.startswith("data: ") and line[6:] != "[DONE]":
            out.append(steady(json.loads(line[6:])))
    return out


def body_for(path: str, body: dict[str, Any], **more: Any) -> dict[str, Any]:
    # Anthropic's and Responses' models sample at 1 unless told: the cache takes temperature 0.
    return {"model": "v/m", "temperature": 0, **body, **more}


@pytest.mark.parametrize(("path", "body"), DIALECTS, ids=[p for p, _ in DIALECTS])
async def test_a_repeat_is_served_by_another_replica_whole_and_streamed(path, body, upstream, redis_url):
    async with replicas(cache_config(upstream.url, redis_url)) as (a, b):
        t0 = time.monotonic()
        first = await a.post(path, json=body_for(path, body))
        await settled(a)
        again = await b.post(path, json=body_for(path, body))
        assert first.status_code == again.status_code == 200, (first.text, again.text)
        assert first.headers["x-switchyard-cache"] == "stored"
        assert again.headers["x-switchyard-cache"] == "hit"
        assert 0 <= int(again.headers["age"]) <= time.monotonic() - t0 + 1  # whole seconds since kept
        assert len(upstream.requests) == 1
        assert steady(again.json()) == steady(first.json())

        streamed = _other_prompt(body_for(path, body, stream=True))
        s1 = await a.post(path, json=streamed)
        await settled(a)
        s2 = await b.post(path, json=streamed)
        assert s1.status_code == s2.status_code == 200, (s1.text, s2.text)
        assert s1.headers["x-switchyard-cache"] == "miss"  # a stream's headers go before its end
        assert s2.headers["x-switchyard-cache"] == "hit"
        assert len(upstream.requests) == 2
        assert "text/event-stream" in s2.headers["content-type"]
        got, want = events(s2.text), events(s1.text)
        assert len(want) > 2 and got == want

        # The streamed answer serves a whole request too: the same text, rendered whole.
        whole = await b.post(path, json={k: v for k, v in streamed.items() if k != "stream"})
        assert whole.headers["x-switchyard-cache"] == "hit" and len(upstream.requests) == 2
        assert "w0 w1 w2 w3" in whole.text


def _other_prompt(body: dict[str, Any]) -> dict[str, Any]:
    out = dict(body)
    for field in ("prompt", "input"):
        if field in out:
            out[field] = out[field] + " again"
    if "messages" in out:
        out["messages"] = [{"role": "user", "content": "hi again"}]
    return out


async def test_embeddings_are_cached_whatever_their_encoding(upstream, redis_url):
    async with replicas(cache_config(upstream.url, redis_url, models={"mode": "embedding"})) as (a, b):
        one = await a.post("/v1/embeddings", json={"model": "v/m", "input": ["a", "b"]})
        await settled(a)
        two = await b.post("/v1/embeddings", json={"model": "v/m", "input": ["a", "b"]})
        b64 = await b.post("/v1/embeddings", json={"model": "v/m", "input": ["a", "b"],
                                                   "encoding_format": "base64"})
    assert one.headers["x-switchyard-cache"] == "stored", one.text
    assert two.headers["x-switchyard-cache"] == b64.headers["x-switchyard-cache"] == "hit"
    assert len(upstream.requests) == 1
    assert steady(two.json()) == steady(one.json())
    assert isinstance(b64.json()["data"][0]["embedding"], str)


async def test_no_team_reads_another_teams_entry(upstream, redis_url):
    chat = {"model": "v/m", "temperature": 0, "messages": [{"role": "user", "content": "secret plan"}]}
    async with replicas(cache_config(upstream.url, redis_url)) as (a, b):
        mine = await a.post("/v1/chat/completions", json=chat)
        await settled(a)
        theirs = await b.post("/v1/chat/completions", json=chat, headers={"authorization": f"Bearer {OTHER}"})
        again = await b.post("/v1/chat/completions", json=chat)
    assert mine.headers["x-switchyard-cache"] == "stored"
    assert theirs.headers["x-switchyard-cache"] == "stored"  # its own entry, from its own call
    assert again.headers["x-switchyard-cache"] == "hit"
    assert len(upstream.requests) == 2


@pytest.mark.parametrize(("scope", "shared"), [("global", True), ("key", False)])
async def test_the_scope_decides_who_shares(scope, shared, upstream, redis_url):
    chat = {"model": "v/m", "seed": 7, "messages": [{"role": "user", "content": "hello"}]}
    cfg = cache_config(upstream.url, redis_url, models={"cache": {**CACHE_ON, "scope": scope}})
    async with replicas(cfg) as (a, b):
        await a.post("/v1/chat/completions", json=chat)
        await settled(a)
        other = await b.post("/v1/chat/completions", json=chat, headers={"authorization": f"Bearer {OTHER}"})
    assert other.headers["x-switchyard-cache"] == ("hit" if shared else "stored")
    assert len(upstream.requests) == (1 if shared else 2)


async def test_the_most_specific_rule_wins(upstream, redis_url):
    """The model caches; team u's own rule turns it off for u's keys; k1's key rule keeps it on."""
    cfg = cache_config(upstream.url, redis_url)
    raw = cfg.model_dump(mode="json")
    raw["teams"] = [{"name": "t", "cache": {"mode": "off"}}, {"name": "u", "cache": {"mode": "off"}}]
    raw["keys"][0]["cache"] = {"mode": "exact", "ttl": 30}
    raw["keys"][0]["key"], raw["keys"][1]["key"] = KEY, OTHER
    raw["master_key"] = MASTER
    cfg = Config.model_validate(raw)
    chat = {"model": "v/m", "temperature": 0, "messages": [{"role": "user", "content": "x"}]}
    async with replicas(cfg, 1) as (a,):
        k1 = [await a.post("/v1/chat/completions", json=chat) for _ in range(2)]
        k2 = [await a.post("/v1/chat/completions", json=chat, headers={"authorization": f"Bearer {OTHER}"})
              for _ in range(2)]
    assert [r.headers["x-switchyard-cache"] for r in k1] == ["stored", "hit"]
    assert [r.headers["x-switchyard-cache"] for r in k2] == ["bypass", "bypass"]
    assert len(upstream.requests) == 3


async def test_cut_failed_and_filtered_answers_are_never_kept(upstream, redis_url):
    chat = {"model": "v/m", "temperature": 0, "max_tokens": 6, "messages": [{"role": "user", "content": "q"}]}
    async with replicas(cache_config(upstream.url, redis_url)) as (a, b):
        upstream.script.append(Behaviour(cut_after=2))
        cut = await a.post("/v1/chat/completions", json={**chat, "stream": True})
        upstream.script += [Behaviour(status=500) for _ in range(5)]  # through the router's retries
        failed = await a.post("/v1/chat/completions", json=chat)
        upstream.script.clear()
        upstream.script += [Behaviour(finish="content_filter"), Behaviour(finish="content_filter")]
        filtered = await a.post("/v1/chat/completions", json=chat)
        filtered_stream = await a.post("/v1/chat/completions", json={**chat, "stream": True})
        await settled(a)
        fresh = await b.post("/v1/chat/completions", json=chat)
    assert cut.status_code == 200 and "error" in cut.text  # the stream ended with an error event
    assert failed.status_code >= 500
    assert filtered.status_code == 200 and filtered.headers["x-switchyard-cache"] == "miss"
    assert '"content_filter"' in filtered_stream.text
    # None of those was kept: the next is a miss, called upstream, and kept.
    assert fresh.headers["x-switchyard-cache"] == "stored"
    assert upstream.cut == 1
    assert len(upstream.requests) >= 5


async def test_a_stream_the_caller_left_is_not_kept(upstream, redis_url):
    chat = {"model": "v/m", "temperature": 0, "max_tokens": 8, "stream": True,
            "messages": [{"role": "user", "content": "tool?"}]}
    upstream.script.append(Behaviour(chunk_delay=0.2))
    async with replicas(cache_config(upstream.url, redis_url)) as (a, b):
        async with a.stream("POST", "/v1/chat/completions", json=chat) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    break  # hang up after the first event
        await asyncio.sleep(0.3)
        await settled(a)
        again = await b.post("/v1/chat/completions", json=chat)
    assert again.headers["x-switchyard-cache"] == "miss"
    assert len(upstream.requests) == 2


async def test_the_callers_cache_control(upstream, redis_url):
    chat = {"model": "v/m", "temperature": 0, "messages": [{"role": "user", "content": "cc"}]}
    async with replicas(cache_config(upstream.url, redis_url), 1) as (a,):
        unkept = await a.post("/v1/chat/completions", json=chat, headers={"cache-control": "no-store"})
        kept = await a.post("/v1/chat/completions", json=chat)
        refreshed = await a.post("/v1/chat/completions", json=chat, headers={"cache-control": "no-cache"})
        hit = await a.post("/v1/chat/completions", json=chat, headers={"cache-control": "no-store"})
    assert unkept.headers["x-switchyard-cache"] == "miss"
    assert kept.headers["x-switchyard-cache"] == "stored"
    assert refreshed.headers["x-switchyard-cache"] == "stored"  # not looked up, kept afresh
    assert hit.headers["x-switchyard-cache"] == "hit"  # no-store still reads
    assert len(upstream.requests) == 3


async def test_only_requests_that_can_repeat_are_cached(upstream, redis_url):
    chat = {"model": "v/m", "messages": [{"role": "user", "content": "rand"}]}
    async with replicas(cache_config(upstream.url, redis_url), 1) as (a,):
        sampled = [await a.post("/v1/chat/completions", json=chat) for _ in range(2)]
        several = await a.post("/v1/chat/completions", json={**chat, "temperature": 0, "n": 2})
        seeded = [await a.post("/v1/chat/completions", json={**chat, "seed": 1}) for _ in range(2)]
    assert [r.headers["x-switchyard-cache"] for r in sampled] == ["bypass", "bypass"]
    assert several.headers["x-switchyard-cache"] == "bypass"
    assert [r.headers["x-switchyard-cache"] for r in seeded] == ["stored", "hit"]
    assert len(upstream.requests) == 4


async def test_the_access_line_says_what_the_cache_did(upstream, redis_url):
    from switchyard.http.access import record

    lines: list[dict[str, Any]] = []
    chat = {"model": "v/m", "temperature": 0, "messages": [{"role": "user", "content": "logged"}]}
    async with replicas(cache_config(upstream.url, redis_url), 1) as (a,):
        a.app.gateway.observers.append(  # type: ignore[attr-defined]
            lambda ctx: lines.append(msgspec.to_builtins(record(ctx))))  # the line's fields, as written
        for _ in range(2):
            await a.post("/v1/chat/completions", json=chat)
        await settled(a)
    assert [line["cache"] for line in lines] == ["stored", "hit"]
    assert "deployment" not in lines[1] and lines[1]["status"] == 200


async def test_cache_off_says_bypass_and_keeps_nothing(upstream):
    cfg = base_config([upstream_model("v/m", upstream.url)])
    chat = {"model": "v/m", "temperature": 0, "messages": [{"role": "user", "content": "x"}]}
    async with serve(cfg) as client:
        rs = [await client.post("/v1/chat/completions", json=chat) for _ in range(2)]
    assert [r.headers["x-switchyard-cache"] for r in rs] == ["bypass", "bypass"]
    assert len(upstream.requests) == 2


async def test_usage_shows_hits_and_what_they_saved(upstream, redis_url):
    chat = {"model": "v/m", "temperature": 0, "max_tokens": 5, "messages": [{"role": "user", "content": "u"}]}
    auth = {"authorization": f"Bearer {MASTER}"}
    async with replicas(cache_config(upstream.url, redis_url)) as (a, b):
        first = await a.post("/v1/chat/completions", json=chat)
        await settled(a)
        hits = [await b.post("/v1/chat/completions", json={**chat, "stream": s}) for s in (False, True)]
        await settled(b)
        for c in (a, b):
            await c.app.gateway.policies.policy.flush()  # type: ignore[attr-defined]
        usage = (await a.get("/admin/usage", headers=auth, params={"group_by": "team"})).json()
        records = (await a.get("/admin/usage/records", headers=auth, params={"team": "t"})).json()
        metrics = (await b.get("/metrics", headers=auth)).text
    assert [h.headers["x-switchyard-cache"] for h in hits] == ["hit", "hit"]
    u = first.json()["usage"]
    tokens = u["prompt_tokens"] + u["completion_tokens"]
    price = (u["prompt_tokens"] * 2.0 + u["completion_tokens"] * 6.0) / 1e6
    # The first answer costs its price; a hit, whole or streamed, costs nothing.
    assert float(first.headers["x-switchyard-cost"]) == pytest.approx(price)
    assert hits[0].headers["x-switchyard-cost"] == "0"
    assert hits[1].text.rstrip().endswith(": x-switchyard-cost 0")
    total = usage["total"]
    assert total["requests"] == 3 and total["cache_hits"] == 2
    assert total["saved_tokens"] == 2 * tokens
    assert total["saved_usd"] == pytest.approx(2 * price)
    # Only the first call was charged.
    assert total["prompt_tokens"] + total["completion_tokens"] == tokens
    assert usage["data"][0]["cache_hits"] == 2
    recs = records["data"]
    assert sorted(r["cache_hit"] for r in recs) == [False, True, True]
    assert all(r["saved_tokens"] == tokens and r["prompt_tokens"] == 0 for r in recs if r["cache_hit"])
    assert all(r["attempts"] == 0 and r["status"] == 200 for r in recs if r["cache_hit"])
    # Replica b answered both hits: its ratio is 1, and it counts what they saved.
    assert 'switchyard_cache_hit_ratio{model="v/m",team="t"} 1.0' in metrics
    saved = next(line for line in metrics.splitlines() if line.startswith("switchyard_cache_saved_usd_total"))
    assert float(saved.split()[-1]) == pytest.approx(2 * price)


async def test_the_native_anthropic_lane_is_served_by_another_replica(redis_url):
    """Anthropic Messages to a Claude deployment (the caller's body forwarded as sent): a repeat is
    a hit on the other replica, whole and streamed, the same events and usage."""
    async with FakeAnthropic() as up:
        model = {"name": "anthropic/claude", "cache": CACHE_ON,
                 "deployments": [{"name": "claude", "provider": "anthropic", "base_url": up.url,
                                  "api_key": up.key, "model": "claude-up"}]}
        cfg = base_config([model], store={"url": redis_url, "timeout": 2.0})
        body = {"model": "anthropic/claude", "max_tokens": 50, "temperature": 0,
                "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
                "messages": [{"role": "user", "content": "hi"}]}
        up.default = Claude(text="one two three", cache_read=7)
        async with replicas(cfg) as (a, b):
            first = await a.post("/v1/messages", json=body)
            s1 = await a.post("/v1/messages", json={**body, "stream": True, "max_tokens": 60})
            await settled(a)
            again = await b.post("/v1/messages", json=body)
            s2 = await b.post("/v1/messages", json={**body, "stream": True, "max_tokens": 60})
    assert first.headers["x-switchyard-cache"] == "stored" and s1.headers["x-switchyard-cache"] == "miss"
    assert again.headers["x-switchyard-cache"] == s2.headers["x-switchyard-cache"] == "hit"
    assert len(up.requests) == 2
    assert steady(again.json()) == steady(first.json())
    assert again.json()["usage"]["cache_read_input_tokens"] == 7
    assert events(s2.text) == events(s1.text) and "message_stop" in s2.text
