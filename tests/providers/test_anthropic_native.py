"""The native lane: the anthropic SDK -> the gateway's /v1/messages -> a Claude deployment on the
calibrated Anthropic mock (tests/fakes/anthropic.py), which records the raw body. The caller's body
arrives as sent (system blocks in place, cache_control, thinking signatures, tools), changed only in
what the gateway owns; a translating deployment of the same group still gets the translation."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import httpx2
import msgspec

from tests.fakes.anthropic import SIGNATURE, Claude, FakeAnthropic
from tests.gateway.conftest import anthropic_sdk, base_config
from tests.gateway.helpers import recording_policies

MODEL = "anthropic/claude"
LONG = "You are a coding agent. " * 200
PATH = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
TOOLS: Any = [{"name": "read", "description": "Read a file", "input_schema": PATH},
               {"name": "bash", "description": "Run a command", "input_schema": {"type": "object"},
                "cache_control": {"type": "ephemeral"}}]
TURNS: Any = [
    {"role": "user", "content": "read a.py"},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "I should read it.", "signature": "EqQBCkYIBxgCKkA+sig/=="},
        {"type": "tool_use", "id": "toolu_01", "name": "read", "input": {"path": "a.py"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "print(1)"}]},
]


def system(call: int) -> Any:
    # Claude Code's first block changes per call; the second carries the cache breakpoint.
    return [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1; cch={call:05d};"},
            {"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]


def config(up: FakeAnthropic, openai_url: str | None = None) -> Any:
    deps: list[dict[str, Any]] = [{"name": "claude", "provider": "anthropic", "base_url": up.url,
                                   "api_key": up.key, "model": "claude-up", "weight": 1000}]
    if openai_url:
        deps.append({"name": "oai", "provider": "openai", "base_url": openai_url, "model": "gpt-up",
                     "weight": 0.001})
    return base_config([{"name": MODEL, "deployments": deps, "max_output_tokens": 1000,
                         "price": {"prompt_per_1m": 3, "completion_per_1m": 15, "cache_read_per_1m": 0.3,
                                   "cache_write_per_1m": 3.75}}])


def client(gw: httpx.AsyncClient, sent: list[bytes]) -> anthropic.AsyncAnthropic:
    async def keep(r: httpx2.Request) -> None:
        sent.append(r.content)
    return anthropic_sdk(gw, http_client=httpx2.AsyncClient(event_hooks={"request": [keep]}))


def ask(call: int, **kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 32000, "system": system(call), "messages": TURNS, "tools": TOOLS,
            "thinking": {"type": "enabled", "budget_tokens": 2000}, **kw}


def assert_native(caller: bytes, upstream: bytes, call: int, **owned: Any) -> None:
    body = json.loads(caller)
    # The SDK writes compact JSON, as the gateway does: the bytes compare, not only the values.
    assert msgspec.json.encode(body) == caller
    assert upstream == msgspec.json.encode({**body, "model": "claude-up", "max_tokens": 1000, **owned})
    blocks = msgspec.json.encode(system(call))
    assert blocks in caller and blocks in upstream  # byte-identical, first block first
    sent = json.loads(upstream)
    assert list(sent) == list(body)  # field order kept
    assert sent["messages"][1]["content"][0]["signature"] == "EqQBCkYIBxgCKkA+sig/=="
    assert sent["tools"] == TOOLS and sent["thinking"] == body["thinking"]


async def test_native_body_arrives_as_sent_and_usage_settles_once(gateway_for) -> None:
    async with FakeAnthropic() as up:
        cfg = config(up)
        policies, settled = recording_policies(cfg)
        sent: list[bytes] = []
        async with gateway_for(cfg, policies=policies) as gw:
            c = client(gw, sent)
            up.script.append(Claude(text="a b c", cache_read=4000, cache_write=2000, thinking="Let me see."))
            msg = await c.messages.create(**ask(1))
            up.script.append(Claude(text="d e"))
            beta = {"anthropic-beta": "interleaved-thinking-2025-05-14", "anthropic-version": "2023-06-01"}
            await c.messages.create(**ask(2), extra_headers=beta)
            await gw.app.state.gateway.drain()
    assert [r.path for r in up.requests] == ["/v1/messages", "/v1/messages"]  # no count round trip
    assert_native(sent[0], up.requests[0].raw, 1)
    assert_native(sent[1], up.requests[1].raw, 2)
    assert up.requests[1].headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert "anthropic-beta" not in up.requests[0].headers
    # Claude's thinking comes back whole, signed, before the text (the caller must return it).
    assert [b.type for b in msg.content] == ["thinking", "text"]
    first = msg.content[0]
    assert first.type == "thinking" and first.thinking == "Let me see." and first.signature == SIGNATURE
    assert msg.content[1].type == "text" and msg.content[1].text == "a b c"
    assert msg.usage.cache_read_input_tokens == 4000 and msg.usage.cache_creation_input_tokens == 2000
    assert len(settled) == 2
    u = settled[0].usage
    prompt = FakeAnthropic.tokens(up.requests[0].body)
    assert msg.usage.input_tokens == prompt
    assert (u.prompt_tokens, u.cached_tokens, u.cache_write_tokens, u.completion_tokens) == (
        prompt + 6000, 4000, 2000, 3)


async def test_native_stream_keeps_the_body_and_answers_anthropic_events(gateway_for) -> None:
    async with FakeAnthropic() as up:
        cfg = config(up)
        policies, settled = recording_policies(cfg)
        sent: list[bytes] = []
        async with gateway_for(cfg, policies=policies) as gw:
            up.script.append(Claude(text="one two three", cache_read=10, cache_write=20, thinking="Hmm."))
            stream = await client(gw, sent).messages.create(**ask(3), stream=True)
            events = [e async for e in stream]
            await gw.app.state.gateway.drain()
    assert_native(sent[0], up.requests[0].raw, 3, stream=True)
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["thinking", "text"]
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert deltas[0].type == "thinking_delta" and deltas[0].thinking == "Hmm."
    assert deltas[1].type == "signature_delta" and deltas[1].signature == SIGNATURE
    assert [e.index for e in events if e.type.startswith("content_block")][:4] == [0, 0, 0, 0]
    text = "".join(d.text for d in deltas if d.type == "text_delta")
    assert text == "one two three"
    final = events[-2]
    assert final.usage.output_tokens == 3
    assert len(settled) == 1 and settled[0].usage.cached_tokens == 10
    assert settled[0].usage.cache_write_tokens == 20 and settled[0].usage.completion_tokens == 3


async def test_a_translating_deployment_of_the_group_still_translates_and_warns(gateway_for,
                                                                                upstream) -> None:
    async with FakeAnthropic() as up:
        sent: list[bytes] = []
        async with gateway_for(config(up, upstream.url)) as gw:
            up.script.append(Claude(status=529))  # the Claude deployment is overloaded: the other serves
            r = await client(gw, sent).messages.with_raw_response.create(**ask(4))
    assert r.http_response.status_code == 200
    assert "thinking" in (r.headers.get("x-switchyard-warning") or "")
    assert upstream.requests[-1].path.endswith("/chat/completions")
    body = upstream.requests[-1].body
    assert body["model"] == "gpt-up" and body["messages"][0]["role"] == "system"
    assert "thinking" not in body and "system" not in body


async def test_count_tokens_asks_the_upstream(gateway_for) -> None:
    async with FakeAnthropic() as up:
        sent: list[bytes] = []
        async with gateway_for(config(up)) as gw:
            n = await client(gw, sent).messages.count_tokens(
                model=MODEL, system=system(5), messages=TURNS, tools=TOOLS)
    seen = up.requests[-1]
    assert seen.path == "/v1/messages/count_tokens"
    assert seen.body["model"] == "claude-up" and "max_tokens" not in seen.body
    assert seen.body["system"] == system(5) and seen.body["tools"] == TOOLS
    assert n.input_tokens == FakeAnthropic.tokens(seen.body)


async def test_claude_on_vertex_takes_the_native_body_in_its_envelope(gateway_for, tmp_path) -> None:
    from tests.fakes.gemini import FakeTokenServer, vertex_dep
    from tests.fakes.vertex_claude import FakeVertexClaude

    accepted: set[str] = set()
    async with FakeVertexClaude(accepted) as fake:
        with FakeTokenServer(b"", accepted) as tokens:
            dep, _ = vertex_dep(tokens, tmp_path, fake.url, "claude-up", name="vc", location="us-east5")
            cfg = base_config([{"name": MODEL, "deployments": [dep], "max_output_tokens": 1000}])
            sent: list[bytes] = []
            async with gateway_for(cfg) as gw:
                c = client(gw, sent)
                fake.inner.script.append(Claude(text="hi from vertex"))
                msg = await c.messages.create(**ask(6))
                n = await c.messages.count_tokens(model=MODEL, system=system(7), messages=TURNS)
    assert msg.content[0].text == "hi from vertex"
    first, count = fake.requests
    assert first.path.endswith("/publishers/anthropic/models/claude-up:rawPredict")
    body = {k: v for k, v in json.loads(sent[0]).items() if k != "model"}
    assert first.raw == msgspec.json.encode({**body, "max_tokens": 1000,
                                             "anthropic_version": "vertex-2023-10-16"})
    assert msgspec.json.encode(system(6)) in first.raw
    assert count.path.endswith("/publishers/anthropic/models/count-tokens:rawPredict")
    assert count.body["model"] == "claude-up" and count.body["system"] == system(7)
    assert n.input_tokens == FakeAnthropic.tokens(fake.inner.requests[-1].body)


async def test_thinking_this_gateway_wrote_unsigned_is_not_sent_to_claude(gateway_for) -> None:
    """A caller whose earlier turns a non-Claude backend answered holds thinking blocks with an
    empty signature (another model's reasoning, shown): Claude would refuse them (the mock does, as
    Anthropic: "Invalid `signature`"), so the native lane drops them, and only them; an assistant
    turn left empty goes too. Counting tokens drops them the same way."""
    theirs = {"type": "thinking", "thinking": "another model's reasoning", "signature": ""}
    turns: Any = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [theirs, {"type": "text", "text": "hello"}]},
        {"role": "user", "content": "and?"},
        {"role": "assistant", "content": [theirs]},  # nothing but the unsigned block
        {"role": "user", "content": "well?"},
        *TURNS]  # Claude's own signed thinking stays
    async with FakeAnthropic() as up:
        sent: list[bytes] = []
        async with gateway_for(config(up)) as gw:
            c = client(gw, sent)
            msg = await c.messages.create(**{**ask(6), "messages": turns})
            n = await c.messages.count_tokens(model=MODEL, messages=turns)
    assert msg.content[-1].type == "text" and n.input_tokens > 0
    for seen in up.requests:
        msgs = seen.body["messages"]
        assert [m["role"] for m in msgs] == ["user", "assistant", "user", "user", "user", "assistant", "user"]
        assert msgs[1]["content"] == [{"type": "text", "text": "hello"}]
        assert msgs[5] == TURNS[1]  # signed: kept as sent
