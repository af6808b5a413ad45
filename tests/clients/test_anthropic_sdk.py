"""The official ``anthropic`` SDK, unmodified, against the client suite's gateway on both routes
(the built-in engine on the tiny test model, and an OpenAI-dialect loopback upstream): a message
sync and async, a stream, and a tool round trip. Pointed at the gateway as Claude Code is:
``base_url`` is the gateway's root, the key a Switchyard key."""

from __future__ import annotations

import asyncio

import anthropic
import pytest

from tests.clients.checks import TOOL_TOKENS, called
from tests.clients.conftest import ENGINE, MAX_TOKENS, PROMPT, UPSTREAM, Gateway
from tests.gateway.conftest import KEY

ROUTES = [pytest.param(ENGINE, id="engine"), pytest.param(UPSTREAM, id="upstream")]
ASK = [{"role": "user", "content": PROMPT}]
# Greedy output needs temperature 0, which only anthropic-version 2023-06-01 takes (Claude Code's).
OLD = {"anthropic-version": "2023-06-01"}
GREEDY = {"temperature": 0}
WEATHER = {"name": "weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                            "required": ["city"]}}


def client(gw: Gateway, **kw) -> anthropic.Anthropic:  # type: ignore[no-untyped-def]
    return anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0, timeout=60, **kw)


def text_of(msg: anthropic.types.Message) -> str:
    return "".join(b.text for b in msg.content if b.type == "text")


@pytest.mark.parametrize("route", ROUTES)
def test_message_sync(gateway: Gateway, route: str) -> None:
    """The text the SDK reads is what the same conversation gets on /v1/chat/completions."""
    msg = client(gateway, default_headers=OLD).messages.create(
        model=route, max_tokens=MAX_TOKENS, messages=ASK, extra_body=GREEDY)  # type: ignore[arg-type]
    assert msg.type == "message" and msg.model == route and msg.role == "assistant"
    assert text_of(msg) == gateway.expect[route, "chat"]
    assert msg.stop_reason in ("max_tokens", "end_turn")
    assert 0 < msg.usage.output_tokens <= MAX_TOKENS and msg.usage.input_tokens > 0


@pytest.mark.parametrize("route", ROUTES)
def test_message_async(gateway: Gateway, route: str) -> None:
    """The SDK's default version (2026-10-21: no sampling fields) and its Bearer key."""
    async def ask() -> anthropic.types.Message:
        async with anthropic.AsyncAnthropic(base_url=gateway.url, api_key=KEY, max_retries=0,
                                            timeout=60) as c:
            return await c.messages.create(model=route, max_tokens=MAX_TOKENS, messages=ASK)  # type: ignore[arg-type]

    msg = asyncio.run(ask())
    assert msg.content and text_of(msg)
    assert 0 < msg.usage.output_tokens <= MAX_TOKENS


@pytest.mark.parametrize("route", ROUTES)
def test_stream(gateway: Gateway, route: str) -> None:
    with client(gateway, default_headers=OLD).messages.stream(
            model=route, max_tokens=MAX_TOKENS, messages=ASK, extra_body=GREEDY) as stream:  # type: ignore[arg-type]
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == text_of(final) == gateway.expect[route, "chat"]
    assert final.stop_reason in ("max_tokens", "end_turn") and 0 < final.usage.output_tokens <= MAX_TOKENS


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_tool_round_trip(gateway: Gateway, route: str, stream: bool) -> None:
    """A named tool is called (on the engine: constrained to its schema), streamed as
    input_json_delta where asked; its result goes back in a tool_result and is answered."""
    c = client(gateway, default_headers=OLD)
    kw = {"model": route, "max_tokens": TOOL_TOKENS, "tools": [WEATHER], "extra_body": GREEDY,
          "tool_choice": {"type": "tool", "name": "weather"}, "messages": ASK}
    if stream:
        with c.messages.stream(**kw) as s:  # type: ignore[arg-type]
            kinds = {ev.type for ev in s}
            msg = s.get_final_message()
        assert "input_json" in kinds or route == UPSTREAM  # the fake upstream sends calls whole
    else:
        msg = c.messages.create(**kw)  # type: ignore[arg-type]
    use = next(b for b in msg.content if b.type == "tool_use")
    assert msg.stop_reason == "tool_use"
    called(use.name, use.input)  # type: ignore[arg-type]
    again = c.messages.create(model=route, max_tokens=MAX_TOKENS, tools=[WEATHER], extra_body=GREEDY,  # type: ignore[list-item]
                              messages=[*ASK, {"role": "assistant", "content": [use.model_dump()]},  # type: ignore[list-item]
                                        {"role": "user", "content": [{"type": "tool_result",
                                                                      "tool_use_id": use.id,
                                                                      "content": "sunny"}]}])
    assert again.type == "message" and again.usage.output_tokens > 0


def test_count_tokens_on_the_engine_is_its_tokenizers(gateway: Gateway) -> None:
    """count_tokens on an engine route is the engine's own count of the templated prompt: what
    the same message's usage reports (cache reads included)."""
    c = client(gateway, default_headers=OLD)
    counted = c.messages.count_tokens(model=ENGINE, messages=ASK)  # type: ignore[arg-type]
    msg = c.messages.create(model=ENGINE, max_tokens=1, messages=ASK, extra_body=GREEDY)  # type: ignore[arg-type]
    u = msg.usage
    assert counted.input_tokens == u.input_tokens + (u.cache_read_input_tokens or 0) > 0
