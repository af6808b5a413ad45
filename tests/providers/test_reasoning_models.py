"""OpenAI's reasoning models through the gateway (issue 28, items 8 and 9): the bound goes as
``max_completion_tokens`` to OpenAI and Azure (their reasoning models refuse ``max_tokens``), a
sampling value such a model refuses is a 400 naming the caller's field before any call, and the
reasoning controls (``reasoning_effort``, ``verbosity``) reach the providers that take them, or a
thinking budget where a provider takes one. The fakes refuse as the service does
(tests/fakes/openai_rules.py); the first tests calibrate them with the ``openai`` SDK."""

from __future__ import annotations

import dataclasses
from typing import Any

import openai
import pytest

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.deployments import DeploymentConfig
from switchyard.dialects.reasoning import EFFORT_BUDGETS, claude_thinking, reasoning_model
from switchyard.providers.rows import wire_for
from tests.fakes.anthropic import Claude, FakeAnthropic
from tests.fakes.azure import FakeAzure
from tests.fakes.bedrock import FakeBedrock
from tests.fakes.bedrock import Reply as AwsReply
from tests.fakes.gemini import FakeGemini
from tests.fakes.gemini import Reply as GReply
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import base_config, upstream_model
from tests.providers.test_cloud_gateway import bedrock_dep, gemini_dep

HI: Any = [{"role": "user", "content": "hi"}]


# -- calibration: the fakes refuse as OpenAI does, as its SDK reads it -------------------------


async def test_the_fakes_refuse_max_tokens_and_sampling_of_reasoning_models_as_openai_does() -> None:
    async with FakeUpstream() as up, FakeAzure() as az:
        clients = [openai.AsyncOpenAI(base_url=up.url, api_key="x", max_retries=0),
                   openai.AsyncAzureOpenAI(azure_endpoint=az.url, api_key=az.key, api_version="2024-10-21",
                                           max_retries=0)]
        for sdk in clients:
            with pytest.raises(openai.BadRequestError) as e:
                await sdk.chat.completions.create(model="o3-mini", messages=HI, max_tokens=50)
            assert e.value.code == "unsupported_parameter" and e.value.param == "max_tokens"
            assert "Use 'max_completion_tokens' instead" in e.value.message
            with pytest.raises(openai.BadRequestError) as e:
                await sdk.chat.completions.create(model="o3-mini", messages=HI, temperature=0.2)
            assert e.value.code == "unsupported_value" and e.value.param == "temperature"
            assert "Only the default (1) value is supported" in e.value.message
            ok = await sdk.chat.completions.create(model="o3-mini", messages=HI, max_completion_tokens=50,
                                                   temperature=1)
            assert ok.choices[0].message.content
            # Other models take both, as they do at OpenAI.
            assert (await sdk.chat.completions.create(model="gpt-4o", messages=HI, max_tokens=5,
                                                      temperature=0.2)).choices
            await sdk.close()


# -- the bound and a model's rules ---------------------------------------------------------------


def _azure_cfg(az: FakeAzure, version: str | None, model: str = "o3-mini") -> Any:
    dep = {"name": "d1", "provider": "azure", "base_url": az.url, "api_key": az.key, "model": model,
           **({"api_version": version} if version else {})}
    return base_config([{"name": "azure/reasoner", "deployments": [dep]}])


@pytest.mark.parametrize("version", ["2024-10-21", None], ids=["classic", "v1"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_o_series_model_through_azure_answers(gateway_for, version, stream) -> None:
    """Fails on the code before: every chat call carried max_tokens, which Azure refuses here."""
    async with FakeAzure() as az, gateway_for(_azure_cfg(az, version)) as gw:
        r = await gw.post("/v1/chat/completions", json={"model": "azure/reasoner", "messages": HI,
                                                        "stream": stream})
        r2 = await gw.post("/v1/chat/completions", json={"model": "azure/reasoner", "messages": HI,
                                                         "max_tokens": 300})
    assert r.status_code == 200, r.text
    assert "Hello from Azure" in r.text or "Hello" in r.text
    assert r2.status_code == 200, r2.text
    first, second = az.requests[0].body, az.requests[1].body
    assert "max_tokens" not in first and first["max_completion_tokens"] == 4096
    assert second["max_completion_tokens"] == 300  # the caller's max_tokens, under the name Azure takes


async def test_an_o_series_model_through_an_openai_shaped_upstream_answers(gateway_for, upstream) -> None:
    """Fails on the code before (max_tokens sent, refused by the fake as by OpenAI)."""
    cfg = base_config([upstream_model("openai/o3", upstream.url, provider="openai", model="o3")])
    async with gateway_for(cfg) as gw:
        r = await gw.post("/v1/chat/completions", json={"model": "openai/o3", "messages": HI,
                                                        "max_completion_tokens": 7, "temperature": 1})
        bad = await gw.post("/v1/chat/completions", json={"model": "openai/o3", "messages": HI,
                                                          "temperature": 0.2})
        penalty = await gw.post("/v1/chat/completions", json={"model": "openai/o3", "messages": HI,
                                                              "presence_penalty": 0.5, "max_tokens": 9})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 7
    assert upstream.requests[0].body["max_completion_tokens"] == 7
    assert "max_tokens" not in upstream.requests[0].body
    # A value the model refuses: a 400 naming the caller's field, and no call made.
    assert bad.status_code == 400, bad.text
    assert bad.json()["error"]["param"] == "temperature"
    assert "reasoning model takes only the default value (1)" in bad.json()["error"]["message"]
    assert penalty.status_code == 400 and penalty.json()["error"]["param"] == "presence_penalty"
    assert len(upstream.requests) == 1


async def test_gpt_5_1_without_effort_takes_sampling(gateway_for, upstream) -> None:
    cfg = base_config([upstream_model("openai/g", upstream.url, provider="openai", model="gpt-5.1")])
    async with gateway_for(cfg) as gw:
        off = await gw.post("/v1/chat/completions", json={"model": "openai/g", "messages": HI,
                                                          "reasoning_effort": "none", "temperature": 0.3})
        on = await gw.post("/v1/chat/completions", json={"model": "openai/g", "messages": HI,
                                                         "temperature": 0.3})
    assert off.status_code == 200, off.text
    assert upstream.requests[0].body["temperature"] == 0.3
    assert upstream.requests[0].body["reasoning_effort"] == "none"
    assert on.status_code == 400 and on.json()["error"]["param"] == "temperature"


def _dep(**kw: Any) -> DeploymentConfig:
    return DeploymentConfig.model_validate({"name": "d", "base_url": "http://x", **kw})


def _chat(**kw: Any) -> CanonicalRequest:
    return CanonicalRequest(kind="chat", model="v/m", dialect="chat", messages=HI, max_tokens=100, **kw)


@pytest.mark.parametrize(("dep", "bound"), [
    ({"provider": "openai"}, "max_completion_tokens"),
    ({"provider": "azure"}, "max_completion_tokens"),
    ({"provider": "azure", "api_version": "2024-10-21"}, "max_completion_tokens"),
    ({"provider": "azure", "api_version": "2024-06-01"}, "max_tokens"),  # before max_completion_tokens
    ({"provider": "vllm"}, "max_tokens"),
    ({"provider": "mistral"}, "max_tokens"),
    ({"provider": "cohere"}, "max_tokens"),
    ({"provider": "fireworks"}, "max_tokens"),
])
def test_the_bound_goes_under_the_name_each_row_takes(dep: dict[str, Any], bound: str) -> None:
    d = _dep(**dep)
    body, _ = wire_for(d).codec.render(_chat(), "gpt-4o", d)
    other = {"max_tokens", "max_completion_tokens"} - {bound}
    assert body[bound] == 100 and not other & set(body)
    # Completions keep max_tokens everywhere (OpenAI's /v1/completions has no other).
    req = CanonicalRequest(kind="completion", model="v/m", dialect="openai", prompt=["x"], max_tokens=5)
    assert wire_for(d).codec.render(req, "gpt-4o", d)[0]["max_tokens"] == 5


@pytest.mark.parametrize(("name", "reasons"), [
    ("o1", True), ("o3-mini", True), ("o4-mini-2025-04-16", True), ("gpt-5", True), ("gpt-5-mini", True),
    ("gpt-5.1-codex", True), ("openai/o3", True), ("gpt-5-chat-latest", False), ("gpt-4o", False),
    ("omni-moderation-latest", False), ("gpt-4.1", False), ("ollama/o1x", False)])
def test_which_models_are_reasoning_models(name: str, reasons: bool) -> None:
    assert (reasoning_model(name) is not None) is reasons


# -- reasoning controls ----------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "azure"])
async def test_effort_and_verbosity_reach_openai_and_azure(gateway_for, provider) -> None:
    """Fails on the code before: both were "unknown parameter(s) dropped"."""
    async with FakeUpstream() as up, FakeAzure() as az:
        dep = ({"name": "d1", "provider": "openai", "base_url": up.url, "model": "gpt-5"}
               if provider == "openai" else
               {"name": "d1", "provider": "azure", "base_url": az.url, "api_key": az.key, "model": "gpt-5"})
        seen = up.requests if provider == "openai" else az.requests
        async with gateway_for(base_config([{"name": "v/gpt-5", "deployments": [dep]}])) as gw:
            r = await gw.post("/v1/chat/completions", json={"model": "v/gpt-5", "messages": HI,
                                                            "reasoning_effort": "high", "verbosity": "low"})
            assert r.status_code == 200, r.text
            assert "x-switchyard-warning" not in r.headers
            assert seen[-1].body["reasoning_effort"] == "high" and seen[-1].body["verbosity"] == "low"
            r = await gw.post("/v1/responses", json={"model": "v/gpt-5", "input": "hi",
                                                     "reasoning": {"effort": "minimal", "summary": "auto"},
                                                     "text": {"verbosity": "high"}})
            assert r.status_code == 200, r.text
            assert "x-switchyard-warning" not in r.headers
            assert seen[-1].body["reasoning_effort"] == "minimal" and seen[-1].body["verbosity"] == "high"
            assert r.json()["reasoning"]["effort"] == "minimal"  # echoed as sent
            bad = await gw.post("/v1/chat/completions", json={"model": "v/gpt-5", "messages": HI,
                                                              "reasoning_effort": "extreme"})
            assert bad.status_code == 400 and bad.json()["error"]["param"] == "reasoning_effort"
            bad = await gw.post("/v1/responses", json={"model": "v/gpt-5", "input": "hi",
                                                       "reasoning": {"effort": "extreme"}})
            assert bad.status_code == 400 and bad.json()["error"]["param"] == "reasoning.effort"


async def test_effort_is_named_in_the_warning_where_no_deployment_takes_it(gateway_for, upstream) -> None:
    cfg = base_config([upstream_model("v/llama", upstream.url, "vllm")])
    async with gateway_for(cfg) as gw:
        r = await gw.post("/v1/chat/completions", json={"model": "v/llama", "messages": HI,
                                                        "reasoning_effort": "low", "verbosity": "low"})
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-warning"] == (
        "reasoning control(s) this model does not take, left out: reasoning_effort, verbosity")
    assert "reasoning_effort" not in upstream.requests[-1].body


async def test_effort_becomes_claudes_thinking_budget(gateway_for) -> None:
    async with FakeAnthropic() as up:
        dep = {"name": "d1", "provider": "anthropic", "base_url": up.url, "api_key": up.key,
               "model": "claude-sonnet-4-5"}
        async with gateway_for(base_config([{"name": "a/c", "deployments": [dep]}])) as gw:
            up.script.append(Claude(text="ok", thinking="hmm"))
            r = await gw.post("/v1/chat/completions", json={"model": "a/c", "messages": HI,
                                                            "reasoning_effort": "low"})
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "ok"
            assert "x-switchyard-warning" not in r.headers
            assert up.requests[-1].body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
            # Lowered below max_tokens; left out where Claude would refuse it.
            await gw.post("/v1/chat/completions", json={"model": "a/c", "messages": HI,
                                                        "reasoning_effort": "high", "max_tokens": 5000})
            assert up.requests[-1].body["thinking"]["budget_tokens"] == 4999
            await gw.post("/v1/chat/completions", json={"model": "a/c", "messages": HI,
                                                        "reasoning_effort": "high", "temperature": 0.5})
            assert "thinking" not in up.requests[-1].body
            await gw.post("/v1/chat/completions", json={"model": "a/c", "messages": HI})
            assert "thinking" not in up.requests[-1].body


def test_claude_thinking_rules() -> None:
    req = _chat(reasoning_effort="medium")
    assert claude_thinking(req, "claude-opus-4-1", 10000) == {"type": "enabled", "budget_tokens": 8192}
    assert claude_thinking(req, "claude-3-5-sonnet-20241022", 10000) is None  # does not think
    assert claude_thinking(req, "claude-opus-4-1", 1000) is None  # no room for Claude's least budget
    off = dataclasses.replace(req, reasoning_effort="none")
    forced = dataclasses.replace(req, tool_choice="required")
    assert claude_thinking(off, "claude-opus-4-1", 10000) is None
    assert claude_thinking(forced, "claude-opus-4-1", 10000) is None
    assert set(EFFORT_BUDGETS) == {"minimal", "low", "medium", "high", "xhigh", "max"}


async def test_effort_becomes_geminis_thinking_budget(gateway_for) -> None:
    async with FakeGemini() as fake:
        fake.default = GReply(text="because", thought="weighing")
        dep = gemini_dep(fake.url, model="gemini-2.5-pro")
        cfg = base_config([{"name": "cloud/m", "deployments": [dep]}])
        async with gateway_for(cfg) as gw:
            r = await gw.post("/v1/chat/completions", json={"model": "cloud/m", "messages": HI,
                                                            "reasoning_effort": "high"})
            assert r.status_code == 200, r.text
            assert fake.requests[-1].body["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 16384}
            assert "x-switchyard-warning" not in r.headers
            r = await gw.post("/v1/responses", json={"model": "cloud/m", "input": "why?",
                                                     "reasoning": {"effort": "max", "summary": "auto"}})
            assert r.status_code == 200, r.text
            assert fake.requests[-1].body["generationConfig"]["thinkingConfig"] == {
                "includeThoughts": True, "thinkingBudget": 24576}  # lowered to what Gemini takes


async def test_effort_becomes_claudes_budget_on_bedrock_converse(gateway_for) -> None:
    async with FakeBedrock() as fake:
        fake.default = AwsReply(text="because")
        dep = bedrock_dep("b", fake.url, model="anthropic.claude-sonnet-4-5-20250929-v1:0")
        async with gateway_for(base_config([{"name": "cloud/c", "deployments": [dep]}])) as gw:
            r = await gw.post("/v1/chat/completions", json={"model": "cloud/c", "messages": HI,
                                                            "reasoning_effort": "minimal"})
    assert r.status_code == 200, r.text
    assert fake.requests[-1].body["additionalModelRequestFields"]["thinking"] == {
        "type": "enabled", "budget_tokens": 1024}
