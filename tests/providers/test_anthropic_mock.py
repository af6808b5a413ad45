"""Calibration of tests/fakes/anthropic.py: the ``anthropic`` SDK, unmodified, is its client and
must parse every answer, stream and error it produces (the mock validates each against the SDK's
own models before sending it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import pytest

from tests.fakes.anthropic import SIGNATURE, Claude, FakeAnthropic

HI = [{"role": "user", "content": "hi"}]
Client = Callable[..., anthropic.AsyncAnthropic]


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    """``client(up)``: the SDK pointed at a fake (with its key, or ``key``); closed at the end."""
    made: list[anthropic.AsyncAnthropic] = []

    def make(up: FakeAnthropic, key: str | None = None) -> anthropic.AsyncAnthropic:
        made.append(anthropic.AsyncAnthropic(base_url=up.url, api_key=key or up.key, max_retries=0))
        return made[-1]

    yield make
    for c in made:
        await c.close()


async def test_sdk_reads_a_whole_answer_with_tools_and_cache_usage(client: Client) -> None:
    async with FakeAnthropic() as up:
        up.script.append(Claude(tools=[("get", {"q": 1}), ("put", {"q": 2})], cache_read=7, cache_write=3))
        msg = await client(up).messages.create(model="claude-x", max_tokens=50, messages=HI,
                                                stop_sequences=["never"])
    assert msg.stop_reason == "tool_use"
    assert [b.type for b in msg.content] == ["text", "tool_use", "tool_use"]
    assert msg.usage.cache_read_input_tokens == 7 and msg.usage.cache_creation_input_tokens == 3
    assert up.requests[-1].path == "/v1/messages"


async def test_sdk_accumulates_a_stream_with_parallel_tool_calls(client: Client) -> None:
    async with FakeAnthropic() as up:
        up.script.append(Claude(text="a b", tools=[("get", {"q": 1}), ("put", {"q": "x"})]))
        async with client(up).messages.stream(model="claude-x", max_tokens=50, messages=HI) as s:
            final = await s.get_final_message()
    assert final.content[0].text == "a b"  # type: ignore[union-attr]
    tools = [b for b in final.content if b.type == "tool_use"]
    assert [(t.name, t.input) for t in tools] == [("get", {"q": 1}), ("put", {"q": "x"})]
    assert final.stop_reason == "tool_use" and final.usage.output_tokens == 12


@pytest.mark.parametrize(("status", "exc"), [(529, anthropic.OverloadedError),
                                             (429, anthropic.RateLimitError),
                                             (401, anthropic.AuthenticationError)])
async def test_sdk_reads_error_statuses(client: Client, status: int, exc: type[Exception]) -> None:
    async with FakeAnthropic() as up:
        up.script.append(Claude(status=status, retry_after="1"))
        with pytest.raises(exc):
            await client(up).messages.create(model="claude-x", max_tokens=5, messages=HI)


async def test_sdk_sees_the_in_band_overload_as_an_error(client: Client) -> None:
    async with FakeAnthropic() as up:
        up.script.append(Claude(inband_error="overloaded_error"))
        with pytest.raises(anthropic.APIStatusError) as e:
            async with client(up).messages.stream(model="claude-x", max_tokens=5, messages=HI) as s:
                await s.get_final_message()
    assert "overloaded" in str(e.value).lower()


async def test_wrong_key_and_invalid_body_are_refused_as_the_api_does(client: Client) -> None:
    async with FakeAnthropic() as up:
        bad = client(up, "nope")
        with pytest.raises(anthropic.AuthenticationError):
            await bad.messages.create(model="claude-x", max_tokens=5, messages=HI)
        with pytest.raises(anthropic.BadRequestError):
            await client(up).messages.create(model="claude-x", max_tokens=5,
                                             messages=[{"role": "robot", "content": "x"}])  # type: ignore[list-item,typeddict-item]


async def test_an_unsigned_thinking_block_is_refused_as_anthropic_does(client: Client) -> None:
    """The SDK's types take any signature string; Anthropic refuses one it did not write, and an
    empty one (what this gateway writes for another backend's reasoning) never is Anthropic's."""
    turns: Any = [{"role": "user", "content": "hi"},
                  {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": ""},
                                                    {"type": "text", "text": "yo"}]},
                  {"role": "user", "content": "and?"}]
    async with FakeAnthropic() as up:
        with pytest.raises(anthropic.BadRequestError, match=r"messages\.1\.content\.0: Invalid `signature`"):
            await client(up).messages.create(model="claude-x", max_tokens=5, messages=turns)
        with pytest.raises(anthropic.BadRequestError, match="Invalid `signature` in `thinking` block"):
            await client(up).messages.count_tokens(model="claude-x", messages=turns)
        turns[1]["content"][0]["signature"] = SIGNATURE
        msg = await client(up).messages.create(model="claude-x", max_tokens=5, messages=turns)
        assert msg.content[0].type == "text"
