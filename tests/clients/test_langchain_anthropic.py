"""LangChain's ``ChatAnthropic`` (langchain-anthropic), unmodified, against the client suite's
gateway on both routes (the built-in engine on the tiny test model, and an OpenAI-dialect loopback
upstream): ``invoke``, ``stream``, and a tool round trip through ``bind_tools`` (the call, then its
``ToolMessage`` answered). Pointed at the gateway as at Anthropic: ``base_url`` the gateway's
root, ``api_key`` a Switchyard key."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from tests.clients.checks import TOOL_TOKENS, called, joined, same_text
from tests.clients.conftest import ENGINE, MAX_TOKENS, PROMPT, UPSTREAM, Gateway
from tests.clients.test_anthropic_sdk import OLD, WEATHER
from tests.gateway.conftest import KEY

ROUTES = [pytest.param(ENGINE, id="engine"), pytest.param(UPSTREAM, id="upstream")]


def chat(gw: Gateway, route: str, **kw: Any) -> ChatAnthropic:
    # temperature 0 (greedy: the text equals the chat column's) needs anthropic-version
    # 2023-06-01, which Claude Code sends too; the SDK's default version refuses sampling fields.
    kw = {"max_tokens": MAX_TOKENS, "temperature": 0, **kw}
    return ChatAnthropic(model=route, base_url=gw.url, api_key=KEY, max_retries=0,  # type: ignore[call-arg, arg-type]
                         timeout=60, default_headers=OLD, **kw)


@pytest.mark.parametrize("route", ROUTES)
def test_invoke(gateway: Gateway, route: str) -> None:
    msg = chat(gateway, route).invoke(PROMPT)
    assert isinstance(msg, AIMessage)
    same_text(gateway, route, "chat", msg.text)
    assert msg.response_metadata["stop_reason"] in ("max_tokens", "end_turn")
    usage = msg.usage_metadata
    assert usage is not None and 0 < usage["output_tokens"] <= MAX_TOKENS and usage["input_tokens"] > 0


@pytest.mark.parametrize("route", ROUTES)
def test_stream(gateway: Gateway, route: str) -> None:
    chunks = list(chat(gateway, route).stream(PROMPT))
    same_text(gateway, route, "chat", joined(c.text for c in chunks))
    total = chunks[0]
    for c in chunks[1:]:
        total += c  # type: ignore[assignment]
    assert total.usage_metadata is not None and 0 < total.usage_metadata["output_tokens"] <= MAX_TOKENS


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_tool_round_trip(gateway: Gateway, route: str, stream: bool) -> None:
    """bind_tools with a forced tool: one call fitting the schema (streamed: assembled from its
    input_json deltas by LangChain), then the ToolMessage carrying its result is answered."""
    model = chat(gateway, route, max_tokens=TOOL_TOKENS).bind_tools([WEATHER], tool_choice="weather")
    ask = [HumanMessage("What is the weather in Paris?")]
    if stream:
        first: Any = None
        for c in model.stream(ask):
            first = c if first is None else first + c
    else:
        first = model.invoke(ask)
    assert len(first.tool_calls) == 1, first
    call = first.tool_calls[0]
    called(call["name"], call["args"])
    assert call["id"]
    again = chat(gateway, route).bind_tools([WEATHER]).invoke(
        [*ask, first, ToolMessage("sunny", tool_call_id=call["id"])])
    assert isinstance(again, AIMessage)
    assert again.usage_metadata is not None and again.usage_metadata["output_tokens"] > 0
