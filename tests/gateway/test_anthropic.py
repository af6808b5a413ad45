"""``/v1/messages`` and ``/v1/messages/count_tokens`` through the HTTP surface, read by the
official ``anthropic`` SDK (unmodified) and by plain HTTP: answers, streams, tools, errors in
Anthropic's shape, the version's sampling rule, what translating leaves out."""

from __future__ import annotations

import asyncio
import json

import anthropic
import pytest

from tests.fakes import claude_code
from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import KEY, base_config, serve, upstream_model
from tests.gateway.conftest import anthropic_sdk as sdk

MODEL = "vendor/up"
HI = [{"role": "user", "content": "hi"}]
WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris"]}},
                            "required": ["city"]}}


@pytest.fixture
def cfg(upstream):  # type: ignore[no-untyped-def]
    model = upstream_model(MODEL, upstream.url, model="up")
    model["aliases"] = ["claude-sonnet-5"]
    return base_config([model, upstream_model("vendor/other", upstream.url)], router={"retries": 0},
                       teams=[{"name": "t", "models": [MODEL]}])


async def test_message(cfg, gateway_for, upstream) -> None:
    async with gateway_for(cfg) as gw:
        msg = await sdk(gw).messages.create(model="claude-sonnet-5", max_tokens=3, system="Be brief.",
                                            messages=[{"role": "user", "content": "hi"}],
                                            metadata={"user_id": "u-1"}, stop_sequences=["zz"])
    assert msg.type == "message" and msg.role == "assistant" and msg.model == "claude-sonnet-5"
    assert msg.id.startswith("msg_")
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == "w0 w1 w2"  # type: ignore[union-attr]
    assert msg.stop_reason == "max_tokens" and msg.stop_sequence is None
    assert msg.usage.output_tokens == 3 and msg.usage.input_tokens > 0
    assert msg.usage.cache_read_input_tokens == 0 and msg.usage.cache_creation_input_tokens == 0
    sent = upstream.requests[0]
    assert sent.path.endswith("/chat/completions")
    assert sent.body["model"] == "up" and sent.body["user"] == "u-1" and sent.bound == 3
    assert sent.body["messages"] == [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": "hi"}]
    assert "stop" not in sent.body  # the gateway applies stop sequences: it must name the one that matched


async def test_stop_sequence_is_named(cfg, gateway_for, upstream) -> None:
    upstream.script.append(Behaviour(text="one two three four"))
    async with gateway_for(cfg) as gw:
        msg = await sdk(gw).messages.create(model=MODEL, max_tokens=50, stop_sequences=["nope", " three"],
                                            messages=[{"role": "user", "content": "count"}])
    assert msg.content[0].text == "one two"  # type: ignore[union-attr]
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == " three"


async def test_stream(cfg, gateway_for) -> None:
    async with gateway_for(cfg) as gw, sdk(gw).messages.stream(model=MODEL, max_tokens=4,
                                       messages=HI) as stream:
        kinds = [ev.type async for ev in stream]
        final = await stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.count("content_block_start") == 1 and kinds.count("content_block_stop") == 1
    assert final.content[0].text == "w0 w1 w2 w3"  # type: ignore[union-attr]
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 4


async def test_raw_stream_events(cfg, gateway_for) -> None:
    """The wire itself: named events in Anthropic's order, a ping, no [DONE]."""
    async with gateway_for(cfg) as gw:
        r = await gw.post("/v1/messages?beta=true", json={
            "model": MODEL, "max_tokens": 2, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
            headers={"x-api-key": KEY, "authorization": "", "anthropic-version": "2023-06-01"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    names = [line[7:] for line in r.text.splitlines() if line.startswith("event: ")]
    assert names == ["message_start", "ping", "content_block_start", "content_block_delta",
                     "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert "[DONE]" not in r.text
    delta = next(json.loads(line[6:]) for line in r.text.splitlines() if '"message_delta"' in line)
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 2


async def test_tool_round_trip(cfg, gateway_for, upstream) -> None:
    """A forced call comes back as a tool_use block with an object input; its result goes back
    as an OpenAI tool message right after the assistant's call."""
    async with gateway_for(cfg) as gw:
        client = sdk(gw)
        ask = [{"role": "user", "content": "Weather in Paris?"}]
        msg = await client.messages.create(model=MODEL, max_tokens=20, tools=[WEATHER],  # type: ignore[list-item]
                                           tool_choice={"type": "tool", "name": "get_weather"},
                                           messages=ask)  # type: ignore[arg-type]
        use = msg.content[0]
        assert msg.stop_reason == "tool_use" and use.type == "tool_use"
        assert use.name == "get_weather" and use.input == {"city": "Paris"}
        result = {"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}
        turns = [*ask, {"role": "assistant", "content": [use.model_dump()]},
                 {"role": "user", "content": [result]}]
        again = await client.messages.create(model=MODEL, max_tokens=2, tools=[WEATHER],  # type: ignore[list-item]
                                             messages=turns)  # type: ignore[arg-type]
    assert again.stop_reason == "max_tokens"
    first, second = upstream.requests[0].body, upstream.requests[1].body
    assert first["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER["input_schema"]}}]
    assert first["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert second["messages"][1]["tool_calls"][0]["id"] == use.id
    assert json.loads(second["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert second["messages"][2] == {"role": "tool", "tool_call_id": use.id, "content": "sunny"}


async def test_any_and_disable_parallel(cfg, gateway_for, upstream) -> None:
    async with gateway_for(cfg) as gw:
        msg = await sdk(gw).messages.create(
            model=MODEL, max_tokens=20, tools=[WEATHER],  # type: ignore[list-item]
            tool_choice={"type": "any", "disable_parallel_tool_use": True},
            messages=[{"role": "user", "content": "Weather?"}])
    assert msg.stop_reason == "tool_use"
    body = upstream.requests[0].body
    assert body["tool_choice"] == "required" and body["parallel_tool_calls"] is False


async def test_images_documents_and_cache_control(cfg, gateway_for, upstream) -> None:
    blocks = [{"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
              {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
              {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
              {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"},
               "title": "T"}]
    async with gateway_for(cfg) as gw:
        r = await gw.post("/v1/messages", json={"model": MODEL, "max_tokens": 4096, "thinking": {
            "type": "enabled", "budget_tokens": 2048}, "messages": [{"role": "user", "content": blocks}]},
            headers={"anthropic-beta": "prompt-caching-2024-07-31"})
    assert r.status_code == 200, r.text
    assert upstream.requests[0].body["messages"][0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "text", "text": "T\n\ndoc"}]
    warning = r.headers["x-switchyard-warning"]
    for name in ("cache_control", "thinking.budget_tokens", "anthropic-beta"):
        assert name in warning


async def test_output_config_format_is_the_json_schema_constraint(cfg, gateway_for, upstream) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    async with gateway_for(cfg) as gw:
        fmt = {"type": "json_schema", "schema": schema}
        r = await gw.post("/v1/messages", json={"model": MODEL, "max_tokens": 2, "messages": HI,
                                                "output_config": {"format": fmt, "effort": "low"}})
        bad = await gw.post("/v1/messages", json={"model": MODEL, "max_tokens": 2, "messages": HI,
                                                  "output_config": {"format": {"type": "json_object"}}})
    assert r.status_code == 200, r.text
    assert upstream.requests[0].body["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    assert "output_config.effort" in r.headers["x-switchyard-warning"]
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("output_config.format.type")


async def test_count_tokens(cfg, gateway_for, upstream) -> None:
    async with gateway_for(cfg) as gw:
        long = [{"role": "user", "content": "hi " * 40}]
        n = await sdk(gw).messages.count_tokens(model=MODEL, messages=long)  # type: ignore[arg-type]
        more = await sdk(gw).messages.count_tokens(model=MODEL, system="x " * 400, messages=long)  # type: ignore[arg-type]
        beta = await gw.post("/v1/messages/count_tokens?beta=true", json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    assert n.input_tokens > 20 and more.input_tokens > n.input_tokens + 100
    assert beta.status_code == 200 and set(beta.json()) == {"input_tokens"}
    assert upstream.requests == []  # counted by the gateway: no upstream call, no charge


# --- errors, in Anthropic's shape ------------------------------------------------------------


async def test_errors_are_the_sdks_own(cfg, gateway_for, upstream) -> None:
    async with gateway_for(cfg) as gw:
        with pytest.raises(anthropic.AuthenticationError) as e401:
            await sdk(gw, key="sk-nope").messages.create(model=MODEL, max_tokens=2,
                                                         messages=HI)
        with pytest.raises(anthropic.PermissionDeniedError) as e403:
            await sdk(gw).messages.create(model="vendor/other", max_tokens=2,
                                          messages=HI)
        with pytest.raises(anthropic.NotFoundError):
            await sdk(gw).messages.create(model="vendor/none", max_tokens=2,
                                          messages=HI)
        with pytest.raises(anthropic.BadRequestError) as e400:
            await sdk(gw).messages.create(model=MODEL, max_tokens=0, messages=HI)
    assert e401.value.status_code == 401 and e401.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    assert e401.value.body["type"] == "error"  # type: ignore[index]
    assert e403.value.body["error"]["type"] == "permission_error"  # type: ignore[index]
    assert "max_tokens" in e400.value.body["error"]["message"]  # type: ignore[index]
    assert upstream.requests == []


@pytest.mark.parametrize(("body", "field"), [
    ({"messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
    ({"max_tokens": 5}, "messages"),
    ({"max_tokens": 5, "messages": [{"role": "tool", "content": "hi"}]}, "messages[0].role"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages[0].content[0].source"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "all"}},
     "tool_choice.type"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "mcp_servers": []}, "mcp_servers"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "temperature": 1.5}, "temperature"),
])
async def test_bad_fields_are_400_naming_them(cfg, gateway_for, body, field) -> None:
    async with gateway_for(cfg) as gw:
        r = await gw.post("/v1/messages", json={"model": MODEL, **body},
                          headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert err["error"]["message"].startswith(field), err


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize("kind", [["auto"], {"type": "auto"}, 3])
async def test_tool_choice_type_of_the_wrong_type_is_a_400(cfg, gateway_for, upstream, path, kind) -> None:
    """A list or an object as tool_choice.type was looked up as a dict key: a 500 (fuzzing)."""
    body = {"model": MODEL, "max_tokens": 5, "messages": HI, "tools": [WEATHER],
            "tool_choice": {"type": kind}}
    async with gateway_for(cfg) as gw:
        r = await gw.post(path, json=body, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 400, r.text
    assert r.json()["type"] == "error"
    assert r.json()["error"]["message"].startswith("tool_choice.type: must be one of auto, any, tool, none")
    assert upstream.requests == []


async def test_refusals_before_the_body_are_in_anthropics_shape(cfg, gateway_for) -> None:
    """What is refused before a body is read under /v1/messages* (a wrong method, an unknown
    path, a request the HTTP parser refuses) is in Anthropic's error shape, as the SDKs read it."""
    async with gateway_for(cfg) as gw:
        answers = [await gw.get("/v1/messages"), await gw.put("/v1/messages/count_tokens", json={}),
                   await gw.delete("/v1/messages?beta=true"), await gw.get("/v1/messages/batches")]
        reader, writer = await asyncio.open_connection(gw.base_url.host, gw.base_url.port)
        writer.write(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nBad\x01Header: y\r\n\r\n")
        raw = await reader.read()
        writer.close()
        other = await gw.get("/v1/chat/completions")  # elsewhere: OpenAI's shape, as before
    assert [r.status_code for r in answers] == [405, 405, 405, 404]
    for r in answers:
        assert r.json()["type"] == "error" and "param" not in r.json()["error"], r.text
        assert r.json()["error"]["type"] in ("invalid_request_error", "not_found_error")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert json.loads(body)["error"] == {"type": "invalid_request_error", "message": (
        "headers: malformed HTTP request: Invalid HTTP request received.")}
    assert other.status_code == 405 and other.json()["error"]["param"] is None


async def test_too_large_and_unknown_fields(upstream, gateway_for) -> None:
    keys = [{"id": "k1", "team": "t", "key": KEY},
            {"id": "k2", "team": "t", "key": "sk-strict", "strict": True}]
    cfg = base_config([upstream_model(MODEL, upstream.url)], server={"max_body_bytes": 2048}, keys=keys)
    odd = {"model": MODEL, "max_tokens": 2, "messages": HI, "frobnicate": 1}
    async with gateway_for(cfg) as gw:
        big = await gw.post("/v1/messages", json={"model": MODEL, "max_tokens": 2,
                                                  "messages": [{"role": "user", "content": "x" * 4000}]})
        lax = await gw.post("/v1/messages", json=odd)
        strict = await gw.post("/v1/messages", json=odd, headers={"authorization": "Bearer sk-strict"})
    assert big.status_code == 413 and big.json()["error"]["type"] == "request_too_large"
    assert lax.status_code == 200 and "frobnicate" in lax.headers["x-switchyard-warning"]
    assert strict.status_code == 400 and strict.json()["error"]["message"].startswith("frobnicate")


async def test_sampling_follows_the_version(cfg, gateway_for, upstream) -> None:
    """Under 2023-06-01 temperature, top_p and top_k are taken (top_k is a 400 naming it for an
    OpenAI upstream, which has none); under the SDK's default (2026-10-21) each is a 400 naming
    it, as Anthropic answers."""
    messages = [{"role": "user", "content": "hi"}]
    async with gateway_for(cfg) as gw:
        old = sdk(gw, default_headers={"anthropic-version": "2023-06-01"})
        await old.messages.create(model=MODEL, max_tokens=2, messages=messages,  # type: ignore[arg-type]
                                  extra_body={"temperature": 0.5, "top_p": 0.9})
        with pytest.raises(anthropic.BadRequestError) as no_top_k:
            await old.messages.create(model=MODEL, max_tokens=2, messages=messages,  # type: ignore[arg-type]
                                      extra_body={"top_k": 5})
        assert "top_k" in no_top_k.value.body["error"]["message"]  # type: ignore[index]
        for name, value in (("temperature", 0.5), ("top_p", 0.9), ("top_k", 5)):
            with pytest.raises(anthropic.BadRequestError) as e:
                await sdk(gw).messages.create(model=MODEL, max_tokens=2, messages=messages,  # type: ignore[arg-type]
                                              extra_body={name: value})
            assert e.value.body["error"]["message"].startswith(name)  # type: ignore[index]
    sent = upstream.requests[0].body
    assert (sent["temperature"], sent["top_p"]) == (0.5, 0.9)
    assert len(upstream.requests) == 1


async def test_429_carries_retry_after(upstream, gateway_for) -> None:
    cfg = base_config([upstream_model(MODEL, upstream.url)],
                      keys=[{"id": "k1", "team": "t", "key": KEY, "limits": {"rpm": 1}}])
    async with gateway_for(cfg) as gw:
        await sdk(gw).messages.create(model=MODEL, max_tokens=2, messages=HI)
        with pytest.raises(anthropic.RateLimitError) as e:
            await sdk(gw).messages.create(model=MODEL, max_tokens=2, messages=HI)
    assert e.value.status_code == 429 and e.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert int(e.value.response.headers["retry-after"]) >= 1


async def test_upstream_down_is_529_overloaded(cfg, gateway_for, upstream) -> None:
    upstream.script.append(Behaviour(status=503, error="busy"))
    async with gateway_for(cfg) as gw:
        with pytest.raises(anthropic.APIStatusError) as e:
            await sdk(gw).messages.create(model=MODEL, max_tokens=2, messages=HI)
    assert e.value.status_code == 529 and e.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert "d1" in e.value.body["error"]["message"]  # type: ignore[index]


async def test_mid_stream_failure_is_an_error_event(cfg, gateway_for, upstream) -> None:
    upstream.script.append(Behaviour(cut_after=2))
    async with gateway_for(cfg) as gw:
        with pytest.raises(anthropic.APIStatusError) as e:
            async with sdk(gw).messages.stream(model=MODEL, max_tokens=8,
                                               messages=HI) as stream:
                async for _ in stream:
                    pass
    assert e.value.body["type"] == "error"  # type: ignore[index]
    assert e.value.body["error"]["type"] in ("api_error", "overloaded_error")  # type: ignore[index]


# --- Claude Code's request ---------------------------------------------------------------------


async def test_claude_code_request_gets_what_fits(upstream, gateway_for) -> None:
    """Its 87 KB first turn (max_tokens 32000, thinking, context_management, effort, a billing
    system block, 12 tools) to models that cannot give 32000 tokens: max_tokens is lowered to the
    window's room or the configured max_output_tokens, the optional features are left out and
    named, and the billing block (a per-conversation header) is not sent."""
    small = {**upstream_model("local/small", upstream.url), "context_window": 40000,
             "aliases": ["claude-sonnet-5"]}
    capped = {**upstream_model("local/capped", upstream.url), "max_output_tokens": 1000,
              "aliases": ["claude-haiku-4-5"]}
    cfg = base_config([small, capped], router={"retries": 0})
    upstream.default = Behaviour(text="hi there")
    async with gateway_for(cfg) as gw:
        a = await gw.post("/v1/messages?beta=true", content=json.dumps(claude_code.body("claude-sonnet-5")),
                          headers=claude_code.headers(KEY))
        b = await gw.post("/v1/messages?beta=true", content=json.dumps(claude_code.body("claude-haiku-4-5")),
                          headers=claude_code.headers(KEY))
        counted = await gw.post("/v1/messages/count_tokens?beta=true", headers=claude_code.headers(KEY),
                                content=json.dumps(claude_code.body("claude-sonnet-5")))
    assert a.status_code == 200 and b.status_code == 200, (a.text, b.text)
    events = [json.loads(line[6:]) for line in a.text.splitlines() if line.startswith("data: ")]
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert text == "hi there"
    to_small = upstream.requests[0].body
    # the window less the prompt, as the gateway counts it (count_tokens says the same)
    assert upstream.requests[0].bound == 40000 - counted.json()["input_tokens"] > 10000
    assert upstream.requests[1].bound == 1000
    assert to_small["messages"][0]["role"] == "system"
    assert "x-anthropic-billing-header" not in to_small["messages"][0]["content"]
    assert to_small["messages"][0]["content"].startswith("You are Claude Code")
    assert [t["function"]["name"] for t in to_small["tools"]] == list(claude_code.TOOLS)
    for field in ("thinking", "context_management", "output_config", "metadata", "system"):
        assert field not in to_small
    warning = a.headers["x-switchyard-warning"]
    for name in ("context_management", "output_config.effort", "cache_control", "anthropic-beta"):
        assert name in warning
    assert "thinking" not in warning  # adaptive, no budget: shown wherever the backend reasons


async def test_counted_in_metrics_and_the_access_log(upstream, capsys) -> None:
    """The endpoints count as the others do: /metrics by endpoint and dialect, tokens charged
    for /v1/messages (count_tokens is answered, counted as a request, and charges nothing)."""
    from tests.http.test_metrics import scrape, value

    cfg = base_config([upstream_model(MODEL, upstream.url)], logging={"access": True})
    async with serve(cfg) as gw:
        ok = await gw.post("/v1/messages", json={"model": MODEL, "max_tokens": 3, "messages": HI})
        n = await gw.post("/v1/messages/count_tokens?beta=true", json={"model": MODEL, "messages": HI})
        assert ok.status_code == 200 and n.status_code == 200
        m = await scrape(gw)
    assert value(m, "switchyard_requests_total", endpoint="/v1/messages", dialect="anthropic") == 1
    counted = value(m, "switchyard_requests_total", endpoint="/v1/messages/count_tokens", dialect="anthropic")
    assert counted == 1
    assert value(m, "switchyard_tokens_total", model=MODEL, kind="completion") == 3
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    logged = {(r["endpoint"], r["status"]) for r in lines if r.get("event") == "request"}
    assert {("/v1/messages", 200), ("/v1/messages/count_tokens", 200)} <= logged


async def test_openapi_documents_the_endpoints(cfg, gateway_for) -> None:
    async with gateway_for(cfg) as gw:
        doc = (await gw.get("/schema/openapi.json")).json()
        models = await gw.get("/v1/models")
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        body = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        props = body["schema"]["properties"]
        assert {"model", "messages", "system", "max_tokens", "tools", "tool_choice", "thinking"} <= set(props)
    assert props["temperature"]["maximum"] == 1  # Anthropic's range, from the table
    assert [m["id"] for m in models.json()["data"]] == [MODEL, "claude-sonnet-5"]  # /v1/models as before
