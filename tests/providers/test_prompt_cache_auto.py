"""``prompt_cache: auto`` on a Claude deployment (docs/cache.md): breakpoints on a long system
prompt and tool list when the caller placed none, measured as the cache-read tokens a repeated
long prompt earns from the Anthropic mock acting as Anthropic's prompt cache."""

from __future__ import annotations

import json
from typing import Any

import pytest

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.deployments import DeploymentConfig
from switchyard.core.settings import ConfigError
from switchyard.providers.anthropic import CODEC
from switchyard.providers.anthropic.codec import AUTO_CACHE_CHARS, auto_breakpoints
from switchyard.providers.rows import ROWS, wire_for
from tests.fakes.anthropic import FakeAnthropic
from tests.gateway.conftest import base_config, serve

LONG = " ".join(f"rule{i}: answer briefly and cite the handbook." for i in range(200))  # ~9000 chars
TOOLS = [{"type": "function", "function": {"name": f"tool{i}", "description": "d " * 400,
                                           "parameters": {"type": "object", "properties": {}}}}
         for i in range(6)]


def config(up: FakeAnthropic, mode: str) -> Any:
    dep = {"name": "claude", "provider": "anthropic", "base_url": up.url, "api_key": up.key,
           "model": "claude-up", "prompt_cache": mode}
    return base_config([{"name": "anthropic/claude", "deployments": [dep]}])


@pytest.mark.parametrize("mode", ["auto", "off"])
async def test_a_repeated_long_prompt_reads_the_providers_cache(mode):
    chat = {"model": "anthropic/claude", "max_tokens": 20, "tools": TOOLS,
            "messages": [{"role": "system", "content": LONG}, {"role": "user", "content": "q"}]}
    native = {"model": "anthropic/claude", "max_tokens": 20, "system": LONG,
              "messages": [{"role": "user", "content": "q2"}]}
    async with FakeAnthropic(prompt_cache=True) as up, serve(config(up, mode)) as gw:
        chats = [(await gw.post("/v1/chat/completions", json=chat)).json()["usage"] for _ in range(2)]
        msgs = [(await gw.post("/v1/messages", json=native)).json()["usage"] for _ in range(2)]
    read = [c.get("prompt_tokens_details", {}).get("cached_tokens", 0) for c in chats]
    if mode == "off":
        assert read == [0, 0] and [m["cache_read_input_tokens"] for m in msgs] == [0, 0]
        assert all("cache_control" not in r.raw.decode() for r in up.requests)
        return
    sent = up.requests[0].body
    assert sent["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert sent["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert read[0] == 0 and read[1] > 1000, chats  # the second read what the first wrote
    assert msgs[0]["cache_creation_input_tokens"] > 1000 and msgs[1]["cache_read_input_tokens"] > 1000
    earned = msgs[1]["cache_read_input_tokens"]
    print(f"cache-read tokens earned on the repeat: chat {read[1]}, messages {earned}")


def test_the_callers_own_breakpoints_and_short_prompts_are_left_alone():
    mine = {"system": [{"type": "text", "text": LONG}], "messages": [
        {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}]}
    assert not auto_breakpoints(mine) and "cache_control" not in mine["system"][0]
    short = {"system": "be brief", "messages": []}
    assert not auto_breakpoints(short) and short["system"] == "be brief"
    edge = {"system": "x" * AUTO_CACHE_CHARS, "messages": []}
    assert auto_breakpoints(edge) and edge["system"][0]["cache_control"] == {"type": "ephemeral"}


def test_prompt_cache_auto_is_for_claude_providers():
    with pytest.raises(ConfigError, match="prompt_cache: auto is for Claude"):
        base_config([{"name": "v/m", "deployments": [{"name": "d", "provider": "openai",
                                                      "base_url": "http://x/v1", "prompt_cache": "auto"}]}])


def test_breakpoints_are_placed_where_the_codec_writes_messages_bodies():
    def places(**dep: Any) -> bool:
        return wire_for(DeploymentConfig(name="d", base_url="http://x", **dep)).cache_breakpoints is not None
    claude = {"anthropic": {}, "bedrock": {"region": "r", "api": "invoke", "model": "anthropic.claude-x"},
              "vertex": {"project": "p", "model": "claude-sonnet-4"}}
    assert all(places(provider=name, **dep) for name, dep in claude.items())
    others = {"bedrock": {"region": "r", "model": "anthropic.claude-x"}, "vertex": {"project": "p"}}
    assert not any(places(provider=name, **others.get(name, {})) for name in ROWS if name != "anthropic")


def test_the_native_lane_leaves_the_callers_decoded_body_as_it_came() -> None:
    """The caller's body is decoded once (``Native.body``) and each attempt's native body is made
    from it: neither the lane nor its breakpoints may change it, or a retry would send another."""
    tools = [{"name": f"t{i}", "description": "d " * 400, "input_schema": {"type": "object"}}
             for i in range(6)]
    thinking = {"type": "thinking", "thinking": "", "signature": ""}  # one this gateway wrote: dropped
    answer = {"role": "assistant", "content": [thinking, {"type": "text", "text": "a"}]}
    doc: dict[str, Any] = {"model": "anthropic/claude", "max_tokens": 64000, "tools": tools,
                           "system": [{"type": "text", "text": LONG}],
                           "messages": [{"role": "user", "content": "q"}, answer]}
    before = json.dumps(doc)
    req = CanonicalRequest(kind="chat", model="anthropic/claude", dialect="anthropic", max_tokens=100)
    for _ in range(2):
        out = CODEC.native(doc, req, "claude-up")
        assert auto_breakpoints(out)
        ephemeral = {"type": "ephemeral"}
        assert out["tools"][-1]["cache_control"] == out["system"][-1]["cache_control"] == ephemeral
        assert out["max_tokens"] == 100 and out["model"] == "claude-up"
        assert out["messages"][1]["content"] == [{"type": "text", "text": "a"}]
        assert json.dumps(doc) == before
