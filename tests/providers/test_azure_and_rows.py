"""Azure OpenAI as data (a row: deployments path + api-version + api-key, or the v1 API), its mock
calibrated with ``openai.AsyncAzureOpenAI``; provider configuration (provider:/dialect:, vendor
endpoints, the missing field named); spend with cache prices."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from switchyard.core.canonical import Usage
from switchyard.core.config import parse_config
from switchyard.core.deployments import DeploymentConfig
from switchyard.core.settings import ConfigError, Price
from switchyard.policies.pricing import nano_usd
from switchyard.providers.rows import wire_for
from tests.fakes.azure import FakeAzure
from tests.gateway.conftest import base_config
from tests.gateway.helpers import sse_objects

HI = [{"role": "user", "content": "hi"}]


async def test_azure_mock_is_what_the_azure_sdk_expects() -> None:
    async with FakeAzure() as up, openai.AsyncAzureOpenAI(
            azure_endpoint=up.url, api_key=up.key, api_version="2024-10-21", max_retries=0) as sdk:
        out = await sdk.chat.completions.create(model="gpt-dep", messages=HI)  # type: ignore[arg-type]
        stream = await sdk.chat.completions.create(model="gpt-dep", messages=HI,  # type: ignore[arg-type]
                                                   stream=True)
        chunks = [c async for c in stream]
    assert out.choices[0].message.content == "Hello from Azure"
    assert chunks[0].choices == []  # Azure's prompt-filter event comes first
    seen = up.requests[0]
    assert seen.path == "/openai/deployments/gpt-dep/chat/completions"
    assert seen.query == {"api-version": "2024-10-21"} and seen.headers["api-key"] == up.key


def _azure(up: FakeAzure, **dep: Any) -> Any:
    return base_config([{"name": "azure/gpt", "deployments": [
        {"name": "d1", "provider": "azure", "base_url": up.url, "api_key": up.key, "model": "gpt-dep",
         **dep}]}])


@pytest.mark.parametrize("version", ["2024-10-21", None])
async def test_azure_through_the_gateway(gateway_for, version: str | None) -> None:
    async with FakeAzure(filtered=True) as up, gateway_for(_azure(up, api_version=version)) as client:
        r = await client.post("/v1/chat/completions",
                              json={"model": "azure/gpt", "messages": HI, "stream": True})
        r2 = await client.post("/v1/chat/completions", json={"model": "azure/gpt", "messages": HI})
    assert r.status_code == 200, r.text
    objs = [o for o in sse_objects(r.text) if o.get("choices")]
    assert "".join(o["choices"][0]["delta"].get("content") or "" for o in objs) == "Hello from Azure"
    assert objs[-1]["choices"][0]["finish_reason"] == "content_filter"
    assert r2.json()["choices"][0]["finish_reason"] == "content_filter"
    seen = up.requests[0]
    if version:
        assert seen.path == "/openai/deployments/gpt-dep/chat/completions"
        assert seen.query == {"api-version": version}
    else:
        assert seen.path == "/openai/v1/chat/completions" and not seen.query
        assert seen.body["model"] == "gpt-dep"
    assert seen.headers["api-key"] == up.key and "Authorization" not in seen.headers
    assert seen.body["stream_options"] == {"include_usage": True}


def _dep(**kw: Any) -> DeploymentConfig:
    return DeploymentConfig.model_validate({"name": "d", **kw})


def test_provider_and_dialect_are_synonyms_for_the_openai_family() -> None:
    assert _dep(dialect="sgp", base_url="http://x").provider == "sgp"
    assert _dep(provider="vllm", base_url="http://x").dialect == "vllm"
    assert _dep(provider="azure", base_url="http://x").dialect == "openai"
    assert _dep(provider="anthropic").dialect == "anthropic"
    with pytest.raises(ValueError, match="disagrees"):
        _dep(provider="vllm", dialect="sgp", base_url="http://x")
    with pytest.raises(ValueError, match="provider:"):
        _dep(dialect="anthropic")


def test_base_url_defaults_to_the_vendors_endpoint() -> None:
    assert _dep(provider="anthropic").base_url == "https://api.anthropic.com"
    assert _dep(provider="bedrock", region="eu-west-1").base_url == "https://bedrock-runtime.eu-west-1.amazonaws.com"
    assert _dep(provider="vertex", project="p", location="us-east5").base_url == \
        "https://us-east5-aiplatform.googleapis.com"
    assert _dep(provider="vertex", project="p").base_url == "https://aiplatform.googleapis.com"
    assert _dep(provider="openai").base_url == "https://api.openai.com/v1"
    assert _dep(provider="anthropic", base_url="http://127.0.0.1:9").base_url == "http://127.0.0.1:9"


@pytest.mark.parametrize(("dep", "says"), [
    ({"provider": "bedrock"}, "needs region"),
    ({"provider": "vertex"}, "needs project"),
    ({"provider": "azure"}, "needs base_url"),
    ({"provider": "vllm"}, "needs base_url"),
    ({"provider": "openai", "region": "x"}, "region is for provider bedrock"),
    ({"provider": "anthropic", "base_url": "ftp://x"}, "https://"),
])
def test_check_config_names_the_missing_field(dep: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config({"models": [{"name": "v/m", "deployments": [{"name": "d", **dep}]}]})
    assert says in str(e.value) and "models.0.deployments.0" in str(e.value)


def test_secrets_take_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_X", "s3cr3t")
    d = _dep(provider="bedrock", region="us-east-1", aws_access_key_id="AKIA",
             aws_secret_access_key="env:AWS_SECRET_X")
    assert d.aws_secret_access_key == "s3cr3t"


def test_every_openai_family_row_and_anthropic_is_registered() -> None:
    for name in ("openai", "vllm", "llamacpp", "mistralrs", "fireworks", "sgp", "azure", "mistral", "cohere",
                 "anthropic"):
        w = wire_for(_dep(provider=name, base_url="http://x"))
        assert ("chat", True) in w.paths
    assert not wire_for(_dep(provider="cohere", base_url="http://x")).caps.stream_usage
    body, _ = wire_for(_dep(provider="mistral")).codec.render(
        __import__("dataclasses").replace(_req(), seed=4), "m", _dep(provider="mistral"))
    assert body["random_seed"] == 4 and "seed" not in body


def _req() -> Any:
    from switchyard.core.canonical import CanonicalRequest
    return CanonicalRequest(kind="chat", model="m/x", dialect="openai", messages=HI)


def test_spend_prices_cache_reads_and_writes_apart() -> None:
    price = Price(prompt_per_1m=3.0, completion_per_1m=15.0, cache_read_per_1m=0.3, cache_write_per_1m=3.75)
    u = Usage(prompt_tokens=1000 + 4000 + 2000, completion_tokens=100, cached_tokens=4000,
              cache_write_tokens=2000)
    # 1000 x 3 + 4000 x 0.3 + 2000 x 3.75 + 100 x 15, per million, in nano-USD
    assert nano_usd(price, u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.cache_write_tokens) == \
        ((3000 + 1200 + 7500 + 1500) * 1000)
    plain = Price(prompt_per_1m=3.0, completion_per_1m=15.0)  # no cache prices: cached costs as prompt
    assert nano_usd(plain, 7000, 100, 4000, 2000) == nano_usd(plain, 7000, 100)


async def test_cohere_no_stream_options_n_fanned_out_completions_as_chat(upstream, gateway_for) -> None:
    cfg = base_config([{"name": "cohere/command", "deployments": [
        {"name": "c", "provider": "cohere", "base_url": upstream.url, "api_key": "ck",
         "model": "command-a"}]}])
    async with gateway_for(cfg) as client:
        r = await client.post("/v1/chat/completions", json={"model": "cohere/command", "messages": HI,
                                                             "stream": True, "max_tokens": 3})
        r2 = await client.post("/v1/chat/completions", json={"model": "cohere/command", "messages": HI,
                                                              "n": 2, "max_tokens": 3})
        r3 = await client.post("/v1/completions", json={"model": "cohere/command", "prompt": "Say x",
                                                        "max_tokens": 3})
        r4 = await client.post("/v1/completions", json={"model": "cohere/command", "prompt": "x",
                                                        "echo": True, "suffix": "y"})
    assert r.status_code == 200 and "stream_options" not in upstream.requests[0].body
    assert upstream.requests[0].path == "/v1/chat/completions"
    assert r2.status_code == 200 and len(r2.json()["choices"]) == 2
    assert all("n" not in s.body for s in upstream.requests[1:3])
    # a chat-only API: the completion body's prompt goes as one user message
    assert r3.status_code == 200 and r3.json()["choices"][0]["text"] == "w0 w1 w2"
    assert upstream.requests[3].body["messages"] == [{"role": "user", "content": "Say x"}]
    assert upstream.requests[3].path == "/v1/chat/completions"
    assert r4.status_code == 400 and r4.json()["error"]["param"] in ("suffix", "echo")
