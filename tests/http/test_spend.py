"""Spend with no price typed: a config of upstream deployments only is charged the catalog's prices,
cache tokens included, for Anthropic, OpenAI, Gemini and Bedrock (their calibrated fakes' usage);
the cost is on each answer (x-switchyard-cost; a stream's trailing comment), in usage and the
metrics; a deployment without a price is counted as unpriced, never as $0."""

from __future__ import annotations

from typing import Any

from tests.fakes import bedrock as aws
from tests.fakes.anthropic import Claude, FakeAnthropic
from tests.fakes.bedrock import FakeBedrock
from tests.fakes.bedrock import Reply as AwsReply
from tests.fakes.gemini import API_KEY as GEMINI_KEY
from tests.fakes.gemini import FakeGemini
from tests.fakes.gemini import Reply as GReply
from tests.fakes.upstream import Behaviour, FakeUpstream
from tests.gateway.conftest import KEY, MASTER, base_config

HI = [{"role": "user", "content": "hi"}]
ADMIN = {"authorization": f"Bearer {MASTER}"}


def usd(nano: float) -> str:
    """USD as x-switchyard-cost writes it: exact to the nano-dollar."""
    return f"{round(nano) / 1e9:.9f}".rstrip("0").rstrip(".")


async def test_anthropic_cache_tokens_at_the_catalog_price(gateway_for) -> None:
    async with FakeAnthropic() as up:
        up.default = Claude(cache_read=40, cache_write=10)
        cfg = base_config([{"name": "anthropic/sonnet", "deployments": [
            {"name": "a", "provider": "anthropic", "base_url": up.url, "api_key": up.key,
             "model": "claude-sonnet-4-5"}]}])
        async with gateway_for(cfg) as c:
            r = await c.post("/v1/messages", headers={"x-api-key": KEY},
                             json={"model": "anthropic/sonnet", "max_tokens": 50, "messages": HI})
            assert r.status_code == 200, r.text
            u = r.json()["usage"]
            assert u["cache_read_input_tokens"] == 40 and u["cache_creation_input_tokens"] == 10
            # $3 input, $0.30 cache read, $3.75 cache write, $15 output per 1M tokens (the catalog's)
            want = u["input_tokens"] * 3000 + 40 * 300 + 10 * 3750 + u["output_tokens"] * 15_000
            assert r.headers["x-switchyard-cost"] == usd(want)
            q = (await c.get("/admin/usage", headers=ADMIN, params={"group_by": "model"})).json()
            assert q["total"]["cost_usd"] == round(want) / 1e9 and q["total"]["unpriced"] == 0


async def test_openai_cached_tokens_whole_and_streamed(gateway_for) -> None:
    async with FakeUpstream() as up:
        up.default = Behaviour(text="a b c", cached_tokens=2)
        cfg = base_config([{"name": "openai/gpt-4o", "deployments": [
            {"name": "o", "provider": "openai", "base_url": up.url, "model": "gpt-4o"}]}])
        async with gateway_for(cfg) as c:
            r = await c.post("/v1/chat/completions", json={"model": "openai/gpt-4o", "messages": HI})
            assert r.status_code == 200, r.text
            u = r.json()["usage"]
            assert u["prompt_tokens_details"]["cached_tokens"] == 2
            # $2.50 input, $1.25 cached input, $10 output per 1M tokens
            want = (u["prompt_tokens"] - 2) * 2500 + 2 * 1250 + u["completion_tokens"] * 10_000
            assert r.headers["x-switchyard-cost"] == usd(want)
            r = await c.post("/v1/chat/completions", json={"model": "openai/gpt-4o", "messages": HI,
                                                           "stream": True})
            assert r.status_code == 200 and "x-switchyard-cost" not in r.headers
            # after the last event: a comment, which SSE clients skip
            assert r.text.endswith(f"data: [DONE]\n\n: x-switchyard-cost {usd(want)}\n\n")


async def test_gemini_cached_content_at_the_catalog_price(gateway_for) -> None:
    async with FakeGemini() as up:
        up.default = GReply(usage={"promptTokenCount": 100, "candidatesTokenCount": 7,
                                   "cachedContentTokenCount": 20})
        cfg = base_config([{"name": "google/flash", "deployments": [
            {"name": "g", "provider": "gemini", "base_url": up.url, "api_key": GEMINI_KEY,
             "model": "gemini-2.5-flash"}]}])
        async with gateway_for(cfg) as c:
            r = await c.post("/v1/chat/completions", json={"model": "google/flash", "messages": HI})
            assert r.status_code == 200, r.text
            # $0.30 input, $0.03 cached, $2.50 output per 1M tokens
            assert r.headers["x-switchyard-cost"] == usd(80 * 300 + 20 * 30 + 7 * 2500)


async def test_bedrock_cache_read_and_write_at_the_catalog_price(gateway_for) -> None:
    async with FakeBedrock() as up:
        up.default = AwsReply(usage={"inputTokens": 5, "outputTokens": 3, "cacheReadInputTokens": 40,
                                     "cacheWriteInputTokens": 10})
        dep: dict[str, Any] = {
            "name": "b", "provider": "bedrock", "base_url": up.url, "region": aws.REGION,
            "model": "anthropic.claude-3-5-sonnet-20240620-v1:0", "aws_access_key_id": aws.ACCESS_KEY,
            "aws_secret_access_key": aws.SECRET_KEY}
        cfg = base_config([{"name": "aws/claude", "deployments": [dep]}])
        async with gateway_for(cfg) as c:
            r = await c.post("/v1/chat/completions", json={"model": "aws/claude", "messages": HI})
            assert r.status_code == 200, r.text
            assert r.headers["x-switchyard-cost"] == usd(5 * 3000 + 40 * 300 + 10 * 3750 + 3 * 15_000)


async def test_a_deployment_without_a_price_is_counted_unpriced(gateway_for) -> None:
    async with FakeUpstream() as up:
        cfg = base_config([{"name": "local/n", "deployments": [
            {"name": "v", "provider": "vllm", "base_url": up.url, "model": "my-finetune"}]}])
        async with gateway_for(cfg) as c:
            r = await c.post("/v1/chat/completions",
                             json={"model": "local/n", "messages": HI, "max_tokens": 3})
            assert r.status_code == 200 and r.headers["x-switchyard-cost"] == "unpriced"
            q = (await c.get("/admin/usage", headers=ADMIN, params={"group_by": "model"})).json()
            assert q["data"][0]["model"] == "local/n" and q["data"][0]["unpriced"] == 1
            assert q["total"]["unpriced"] == 1 and q["total"]["cost_usd"] == 0
            m = (await c.get("/metrics", headers=ADMIN)).text
            assert 'switchyard_unpriced_requests_total{model="local/n",team="t"} 1.0' in m
