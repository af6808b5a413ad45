"""OpenAI callers -> the gateway (real sockets) -> a Claude deployment on the calibrated Anthropic
mock (tests/fakes/anthropic.py): requests written as the Messages API wants them, answers and
streams read back, faults retried or reported as the issue asks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from switchyard.core.canonical import CanonicalRequest
from switchyard.policies.pricing import Pricing
from switchyard.providers.anthropic import CODEC
from tests.fakes.anthropic import Claude, FakeAnthropic
from tests.gateway.conftest import KEY, base_config
from tests.gateway.helpers import recording_policies, sse_objects

MODEL = "anthropic/claude"
HI = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get", "description": "d",
                                           "parameters": {"type": "object", "properties": {"q": {}}}}},
         {"type": "function", "function": {"name": "put", "parameters": {"type": "object"}}}]


def claude(*ups: FakeAnthropic, **model: Any) -> Any:
    deps = [{"name": f"d{i}", "provider": "anthropic", "base_url": up.url, "api_key": up.key,
             "model": "claude-up", "weight": 1000 if i == 0 else 0.001} for i, up in enumerate(ups)]
    return base_config([{"name": MODEL, "deployments": deps, **model}])


async def _chat(client: Any, **body: Any) -> Any:
    return await client.post("/v1/chat/completions", json={"model": MODEL, "messages": HI, **body})


async def test_text_answer_with_system_default_max_tokens_and_cache_usage(gateway_for) -> None:
    async with FakeAnthropic() as up, gateway_for(claude(up)) as client:
        up.script.append(Claude(text="Hi there", cache_read=7, cache_write=3))
        r = await _chat(client, temperature=0.5, user="u1")
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["choices"][0]["message"]["content"] == "Hi there"
    assert out["choices"][0]["finish_reason"] == "stop"
    seen = up.requests[-1]
    assert seen.headers["x-api-key"] == up.key and seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in {k.lower() for k in seen.headers}
    assert seen.body["system"] == "be brief" and seen.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert seen.body["max_tokens"] == 4096 and seen.body["model"] == "claude-up"
    assert seen.body["temperature"] == 0.5 and seen.body["metadata"] == {"user_id": "u1"}
    # Anthropic's input_tokens excludes the cache: the caller sees OpenAI's prompt_tokens.
    u = out["usage"]
    assert u["completion_tokens"] == 2
    assert u["prompt_tokens"] > 10 and u["prompt_tokens_details"]["cached_tokens"] == 7


async def test_stream_text_and_usage(gateway_for) -> None:
    async with FakeAnthropic() as up, gateway_for(claude(up)) as client:
        up.script.append(Claude(text="one two three"))
        r = await _chat(client, stream=True, stream_options={"include_usage": True})
    objs = sse_objects(r.text)
    text = "".join(o["choices"][0]["delta"].get("content") or "" for o in objs if o.get("choices"))
    assert text == "one two three"
    assert [o["choices"][0]["finish_reason"] for o in objs if o.get("choices")][-1] == "stop"
    assert objs[-1]["usage"]["completion_tokens"] == 3
    assert up.requests[-1].body["stream"] is True


async def test_parallel_streamed_tool_calls_keep_their_ids_and_arguments(gateway_for) -> None:
    async with FakeAnthropic() as up, gateway_for(claude(up)) as client:
        up.script.append(Claude(text="", tools=[("get", {"q": "first"}), ("put", {"q": "second"})]))
        r = await _chat(client, stream=True, tools=TOOLS)
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for o in sse_objects(r.text):
        for c in o.get("choices") or []:
            finish = c.get("finish_reason") or finish
            for d in c["delta"].get("tool_calls") or []:
                slot = calls.setdefault(d["index"], {"id": "", "name": "", "args": ""})
                slot["id"] += d.get("id") or ""
                slot["name"] += (d.get("function") or {}).get("name") or ""
                slot["args"] += (d.get("function") or {}).get("arguments") or ""
    assert finish == "tool_calls"
    assert [(c["name"], json.loads(c["args"])) for c in calls.values()] == [
        ("get", {"q": "first"}), ("put", {"q": "second"})]
    assert len({c["id"] for c in calls.values()}) == 2
    assert up.requests[-1].body["tools"][0] == {"name": "get", "description": "d",
                                                "input_schema": TOOLS[0]["function"]["parameters"]}


async def test_tool_round_trip_and_tool_choice(gateway_for) -> None:
    history = [{"role": "user", "content": "weather?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "toolu_1", "type": "function",
                    "function": {"name": "get", "arguments": '{"q": 1}'}},
                   {"id": "toolu_2", "type": "function", "function": {"name": "put", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
               {"role": "tool", "tool_call_id": "toolu_2", "content": "done"}]
    async with FakeAnthropic() as up, gateway_for(claude(up)) as client:
        r = await client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": history, "tools": TOOLS, "tool_choice": "required",
            "parallel_tool_calls": False})
        assert r.status_code == 200, r.text
        r2 = await client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": HI, "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "put"}}})
        assert r2.status_code == 200, r2.text
        up.script.append(Claude(text="", tools=[("get", {"q": 2})]))
        r3 = await _chat(client, tools=TOOLS)
    sent = up.requests[0].body
    assert sent["messages"][1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"q": 1}},
        {"type": "tool_use", "id": "toolu_2", "name": "put", "input": {}}]}
    assert sent["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "done"}]}
    assert sent["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert up.requests[1].body["tool_choice"] == {"type": "tool", "name": "put"}
    msg = r3.json()["choices"][0]
    assert msg["finish_reason"] == "tool_calls"
    assert msg["message"]["tool_calls"][0]["function"] == {"name": "get", "arguments": '{"q": 2}'}


async def test_json_schema_and_stop(gateway_for) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    async with FakeAnthropic() as up, gateway_for(claude(up)) as client:
        r = await _chat(client, response_format={"type": "json_schema",
                                                 "json_schema": {"name": "a", "schema": schema}})
        up.script.append(Claude(text="alpha beta STOP gamma"))
        r2 = await _chat(client, stop=["STOP"])
    assert up.requests[0].body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert json.loads(r.json()["choices"][0]["message"]["content"]) == {"answer": "Hello from Claude"}
    assert up.requests[1].body["stop_sequences"] == ["STOP"]
    assert r2.json()["choices"][0]["message"]["content"] == "alpha beta "
    assert r2.json()["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("fault", [Claude(status=429, retry_after="1"), Claude(status=529),
                                   Claude(inband_error="overloaded_error")])
async def test_overloads_are_retried_on_the_second_deployment(gateway_for, fault: Claude) -> None:
    async with FakeAnthropic() as a, FakeAnthropic() as b, gateway_for(claude(a, b)) as client:
        a.default = fault
        r = await _chat(client, stream=True)
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-deployment"] == f"{MODEL}/d1"
    assert len(a.requests) == 1 and len(b.requests) == 1
    assert "Hello from Claude" in "".join(o["choices"][0]["delta"].get("content") or ""
                                          for o in sse_objects(r.text) if o.get("choices"))


async def test_error_after_content_reaches_the_caller_as_an_error(gateway_for) -> None:
    async with FakeAnthropic() as up, gateway_for(claude(up)) as client:
        up.script.append(Claude(text="a b c d", inband_error="overloaded_error", error_after=2))
        r = await _chat(client, stream=True)
    objs = sse_objects(r.text)
    assert "error" in objs[-1]
    assert all(c.get("finish_reason") is None for o in objs for c in o.get("choices") or [])
    assert len(up.requests) == 1  # not retried: part of the answer was sent


async def test_upstream_401_is_a_gateway_worded_502_without_its_text(gateway_for) -> None:
    async with FakeAnthropic() as up:
        cfg = claude(up)
        up.key = "sk-ant-other"  # the upstream refuses the deployment's key, quoting it
        async with gateway_for(cfg) as client:
            r = await _chat(client)
    assert r.status_code == 502
    assert "sk-ant-test" not in r.text and "invalid x-api-key" not in r.text
    assert "credentials" in r.json()["error"]["message"]


async def test_legacy_completion_becomes_one_user_message(gateway_for) -> None:
    async with FakeAnthropic() as up, gateway_for(claude(up)) as client:
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "Say hi", "max_tokens": 9})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == "Hello from Claude"
    assert up.requests[-1].body["messages"] == [{"role": "user", "content": "Say hi"}]
    assert up.requests[-1].body["max_tokens"] == 9


async def test_logprobs_refused_naming_the_field(gateway_for) -> None:
    async with FakeAnthropic() as up, gateway_for(claude(up)) as client:
        r = await _chat(client, logprobs=True, top_logprobs=2)
        r2 = await _chat(client, seed=3)
    assert r.status_code == 400 and r.json()["error"]["param"] in ("logprobs", "top_logprobs")
    assert r2.status_code == 400 and r2.json()["error"]["param"] == "seed"
    assert not up.requests


def test_native_lane_keeps_the_callers_body_but_the_gateways_fields() -> None:
    body = {"model": "claude-caller", "max_tokens": 64000,
            "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1;"},
                       {"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "sig=="}]}],
            "thinking": {"type": "enabled", "budget_tokens": 1024}, "smuggled": 1}
    req = CanonicalRequest(kind="chat", model="anthropic/claude", dialect="anthropic", max_tokens=8192,
                           stream=True)
    out = CODEC.native(body, req, "claude-up")
    assert out["model"] == "claude-up" and out["max_tokens"] == 8192 and out["stream"] is True
    assert out["system"] == body["system"] and out["messages"] == body["messages"]
    assert out["thinking"] == body["thinking"] and "smuggled" not in out
    assert list(out)[:3] == ["model", "max_tokens", "system"]  # the caller's order
    assert CODEC.native(body, req, "m", ["smuggled"])["smuggled"] == 1


async def test_sampling_refused_at_an_api_version_without_it(gateway_for) -> None:
    async with FakeAnthropic() as up2:
        cfg = base_config([{"name": MODEL, "deployments": [
            {"name": "d0", "provider": "anthropic", "base_url": up2.url, "api_key": up2.key,
             "api_version": "2026-10-21"}]}])
        async with gateway_for(cfg) as client:
            r = await _chat(client, top_p=0.9)
            r2 = await _chat(client)
    assert r.status_code == 400 and r.json()["error"]["param"] == "top_p"
    assert "2026-10-21" in r.json()["error"]["message"]
    assert r2.status_code == 200 and up2.requests[-1].headers["anthropic-version"] == "2026-10-21"


@pytest.mark.parametrize("stream", [False, True])
async def test_cache_usage_is_settled_once_in_openai_meaning(gateway_for, stream: bool) -> None:
    async with FakeAnthropic() as up:
        cfg = claude(up, price={"prompt_per_1m": 3, "completion_per_1m": 15, "cache_read_per_1m": 0.3,
                                "cache_write_per_1m": 3.75})
        policies, settled = recording_policies(cfg)
        async with gateway_for(cfg, policies=policies) as client:
            up.script.append(Claude(text="a b c", cache_read=4000, cache_write=2000))
            r = await _chat(client, stream=stream)
            await client.app.state.gateway.drain()  # type: ignore[attr-defined]
    assert r.status_code == 200
    assert len(settled) == 1
    u = settled[0].usage
    sent = up.requests[-1].body
    input_tokens = len(json.dumps(sent["messages"]).split()) + len(str(sent.get("system", "")).split())
    assert (u.prompt_tokens, u.cached_tokens, u.cache_write_tokens, u.completion_tokens) == (
        input_tokens + 6000, 4000, 2000, 3)
    cost = Pricing(cfg).route(MODEL).cost("", u)  # the route's (one) deployment's price
    assert cost == round((input_tokens * 3 + 4000 * 0.3 + 2000 * 3.75 + 3 * 15) * 1000)


# Every completion dialect's body reaches a chat-only provider as one user message.
COMPLETION_CALLERS = {
    "openai": ("/v1/completions", {}, {"prompt": "Say hi", "max_tokens": 7}),
    "llamacpp": ("/v1/completions", {}, {"prompt": "Say hi", "n_predict": 7}),
    "mistralrs": ("/v1/completions", {"x-switchyard-dialect": "mistralrs"},
                  {"prompt": "Say hi", "max_tokens": 7}),
    "fireworks": ("/inference/v1/completions", {}, {"prompt": "Say hi", "max_tokens": 7}),
    "sgp": ("/v4/beta/completions", {"x-api-key": KEY}, {"prompt": "Say hi", "max_new_tokens": 7}),
    "llamacpp_native": ("/completion", {}, {"prompt": "Say hi", "n_predict": 7}),
}


@pytest.mark.parametrize("caller", sorted(COMPLETION_CALLERS))
async def test_every_completion_dialect_reaches_claude(gateway_for, caller: str) -> None:
    path, headers, body = COMPLETION_CALLERS[caller]
    async with FakeAnthropic() as up, gateway_for(claude(up)) as client:
        r = await client.post(path, headers=headers, json={**body, "model": MODEL})
        bad = await client.post(path, headers=headers, json={**body, "model": MODEL, "logit_bias": {"1": 2}})
    assert r.status_code == 200, r.text
    assert "Hello from Claude" in r.text
    assert up.requests[0].body["messages"] == [{"role": "user", "content": "Say hi"}]
    assert up.requests[0].body["max_tokens"] == 7
    assert bad.status_code in (400, 422) and "logit_bias" in bad.text
    assert len(up.requests) == 1


async def test_n_is_fanned_out_one_call_per_choice(gateway_for) -> None:
    async with FakeAnthropic() as up, gateway_for(claude(up)) as client:
        r = await _chat(client, n=2)
    assert r.status_code == 200, r.text
    assert [c["index"] for c in r.json()["choices"]] == [0, 1]
    assert len(up.requests) == 2 and all("n" not in s.body for s in up.requests)


async def test_cache_writes_show_in_metrics_usage_api_and_records(gateway_for) -> None:
    from tests.gateway.conftest import MASTER

    async with FakeAnthropic() as up:
        cfg = claude(up, price={"prompt_per_1m": 3, "completion_per_1m": 15, "cache_read_per_1m": 0.3,
                                "cache_write_per_1m": 3.75})
        async with gateway_for(cfg) as client:
            up.script.append(Claude(text="a b c", cache_read=40, cache_write=2000))
            assert (await _chat(client)).status_code == 200
            await client.app.state.gateway.drain()
            admin = {"authorization": f"Bearer {MASTER}"}
            metrics = (await client.get("/metrics", headers=admin)).text
            agg = (await client.get("/admin/usage", headers=admin, params={"group_by": "model"})).json()
            recs = (await client.get("/admin/usage/records", headers=admin, params={"team": "t"})).json()
    lines = {ln.split("{")[0] + "{" + ln.split("{")[1].split("}")[0] + "}": float(ln.rsplit(" ", 1)[1])
             for ln in metrics.splitlines() if ln.startswith("switchyard_tokens")}
    kinds = {k.split('kind="')[1].split('"')[0]: v for k, v in lines.items() if MODEL in k}
    assert kinds["cache_write"] == 2000 and kinds["cached"] == 40 and kinds["prompt"] > 2040
    assert agg["total"]["cache_write_tokens"] == 2000 and agg["total"]["cached_tokens"] == 40
    assert agg["data"][0]["model"] == MODEL and agg["data"][0]["cache_write_tokens"] == 2000
    assert [(r["cache_write_tokens"], r["cached_tokens"]) for r in recs["data"]] == [(2000, 40)]
