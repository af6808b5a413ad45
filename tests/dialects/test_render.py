"""Answers in the caller's shape (whole and streamed), the stop scanner, and chunk accounting."""

from __future__ import annotations

import json

import msgspec
import pytest

from switchyard.core.canonical import CanonicalRequest, Chunk, Completion, TokenLogprob, TopLogprob, Usage
from switchyard.core.stops import StopScanner
from switchyard.dialects.anthropic.render import AnthropicRenderer
from switchyard.dialects.render import FINGERPRINT, RENDERERS
from switchyard.gateway.streaming import Tally, gather


def canon(dialect: str = "openai", **kw) -> CanonicalRequest:
    kind = "chat" if dialect == "chat" else "completion"
    return CanonicalRequest(kind=kind, model="vendor/caller-name", dialect=dialect, **kw)


def events(raw: bytes) -> list[str]:
    return [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]


LPS = [TokenLogprob("He", -0.5, [TopLogprob("He", -0.5), TopLogprob("She", -1.5)]),
       TokenLogprob("llo", -0.25, [TopLogprob("llo", -0.25)])]
USAGE = Usage(prompt_tokens=4, completion_tokens=2, cached_tokens=3)


def whole(shape: str, **kw) -> dict:
    comp = Completion(choices=[gather([Chunk(text="Hello", finish_reason="stop", logprobs=LPS)],
                                      USAGE).choices[0]], usage=USAGE)
    return RENDERERS[shape](canon(shape.removesuffix("_native"), **kw)).completion(comp)


@pytest.mark.parametrize("shape", ["openai", "vllm", "llamacpp", "mistralrs", "fireworks"])
def test_text_completion(shape: str) -> None:
    out = whole(shape)
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-")
    assert out["model"] == "vendor/caller-name"
    assert out["system_fingerprint"]
    assert isinstance(out["created"], int)
    c = out["choices"][0]
    assert c["text"] == "Hello" and c["index"] == 0 and c["finish_reason"] == "stop"
    assert c["logprobs"] == {"tokens": ["He", "llo"], "token_logprobs": [-0.5, -0.25],
                             "top_logprobs": [{"He": -0.5, "She": -1.5}, {"llo": -0.25}],
                             "text_offset": [0, 2]}
    assert out["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6,
                            "prompt_tokens_details": {"cached_tokens": 3}}


PROMPT_LPS = [TokenLogprob("Say", None), TokenLogprob(" hi", -2.0, [TopLogprob(" hi", -2.0)])]


def test_echo_puts_prompt_logprobs_first_with_offsets_from_zero() -> None:
    chunk = Chunk(text="Say hiHello", finish_reason="stop", logprobs=LPS, prompt_logprobs=PROMPT_LPS)
    comp = Completion(choices=gather([chunk], USAGE).choices, usage=USAGE)
    out = RENDERERS["openai"](canon(echo=True, logprobs=1)).completion(comp)
    lp = out["choices"][0]["logprobs"]
    assert lp["tokens"] == ["Say", " hi", "He", "llo"]
    assert lp["token_logprobs"] == [None, -2.0, -0.5, -0.25]
    assert lp["top_logprobs"][0] is None and lp["top_logprobs"][1] == {" hi": -2.0}
    assert lp["text_offset"] == [0, 3, 6, 8]
    assert json.loads(json.dumps(out))["choices"][0]["logprobs"]["token_logprobs"][0] is None
    # streamed: the first event carries the prompt's logprobs, later offsets continue from there
    ev = stream("openai", [Chunk(text="Say hiHe", logprobs=LPS[:1], prompt_logprobs=PROMPT_LPS),
                           Chunk(text="llo", logprobs=LPS[1:], finish_reason="stop")], echo=True)
    first, second = (json.loads(e)["choices"][0]["logprobs"] for e in ev[:2])
    assert first["tokens"] == ["Say", " hi", "He"] and first["text_offset"] == [0, 3, 6]
    assert first["token_logprobs"][0] is None and second["text_offset"] == [8]


def test_sgp_has_chat_style_and_legacy_logprobs() -> None:
    """The reference's chat-style content, and the legacy arrays scale-gp's CompletionV5 reads."""
    out = whole("sgp")
    lp = out["choices"][0]["logprobs"]
    assert lp["tokens"] == ["He", "llo"] and lp["token_logprobs"] == [-0.5, -0.25]
    assert lp["text_offset"] == [0, 2] and lp["top_logprobs"][0] == {"He": -0.5, "She": -1.5}
    assert lp["content"][0] == {"token": "He", "logprob": -0.5, "bytes": list(b"He"),
                                "top_logprobs": [{"token": "He", "logprob": -0.5, "bytes": list(b"He")},
                                                 {"token": "She", "logprob": -1.5, "bytes": list(b"She")}]}
    assert out["choices"][0]["text"] == "Hello" and out["usage"]["total_tokens"] == 6


def test_chat_completion() -> None:
    out = whole("chat")
    assert out["object"] == "chat.completion" and out["id"].startswith("chatcmpl-")
    c = out["choices"][0]
    assert c["message"] == {"role": "assistant", "content": "Hello"}
    assert c["logprobs"]["content"][1]["token"] == "llo"
    assert out["usage"]["prompt_tokens_details"]["cached_tokens"] == 3


def test_llamacpp_native_completion() -> None:
    comp = Completion(choices=gather([Chunk(text="Hi", finish_reason="stop", stop_word="\n")], USAGE).choices,
                      usage=USAGE)
    out = RENDERERS["llamacpp_native"](canon("llamacpp")).completion(comp)
    assert out["content"] == "Hi" and out["stop"] is True
    assert out["stop_type"] == "word" and out["stopping_word"] == "\n"
    assert out["tokens_evaluated"] == 4 and out["tokens_cached"] == 3 and out["tokens_predicted"] == 2
    assert out["truncated"] is False and "timings" in out and "tokens" in out
    limit = RENDERERS["llamacpp_native"](canon("llamacpp")).completion(
        Completion(choices=gather([Chunk(text="x", finish_reason="length")], USAGE).choices, usage=USAGE))
    assert limit["stop_type"] == "limit" and limit["stopping_word"] == ""


# --- streams -----------------------------------------------------------------------------------

def stream(shape: str, chunks: list[Chunk], **kw) -> list[str]:
    r = RENDERERS[shape](canon(shape.removesuffix("_native"), **kw))
    raw = b"".join(r.event(c) for c in chunks)
    return events(raw + r.closing(USAGE, chunks[-1]))


CHUNKS = [Chunk(text="He", logprobs=LPS[:1]), Chunk(text="llo", logprobs=LPS[1:], finish_reason="stop")]


@pytest.mark.parametrize("shape", ["openai", "llamacpp", "mistralrs", "vllm"])
def test_text_completion_stream_without_usage(shape: str) -> None:
    ev = stream(shape, CHUNKS)
    assert ev[-1] == "[DONE]"
    objs = [json.loads(e) for e in ev[:-1]]
    assert len(objs) == 2 and all("usage" not in o for o in objs)
    assert all(o["model"] == "vendor/caller-name" and o["object"] == "text_completion" for o in objs)
    assert len({o["id"] for o in objs}) == 1
    assert objs[1]["choices"][0]["logprobs"]["text_offset"] == [2]  # offsets run across events


def test_stream_usage_when_asked() -> None:
    ev = stream("openai", CHUNKS, include_usage=True)
    last = json.loads(ev[-2])
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 2
    assert last["usage"]["prompt_tokens_details"] == {"cached_tokens": 3}


@pytest.mark.parametrize(("shape", "done"), [("fireworks", True), ("sgp", False)])
def test_stream_usage_always_for_fireworks_and_sgp(shape: str, done: bool) -> None:
    """Unasked usage rides an event with a choice (the finish repeated, no text): callers of these
    SDKs read choices[0] of every event. SGP's SDKs parse every data line as JSON: no [DONE]."""
    ev = stream(shape, CHUNKS)
    assert (ev[-1] == "[DONE]") is done and "[DONE]" not in ev[:-1]
    last = json.loads(ev[-2] if done else ev[-1])
    assert last["usage"]["total_tokens"] == 6
    assert last["choices"] == [{"text": "", "index": 0, "logprobs": None, "finish_reason": "stop"}]


@pytest.mark.parametrize("shape", ["sgp", "sgp_v5", "sgp_chat", "sgp_v5_chat"])
def test_sgp_streams_never_send_done(shape: str) -> None:
    r = RENDERERS[shape](canon("chat" if "chat" in shape else "sgp", include_usage=True))
    chunks = [Chunk(role="assistant", text="")] if "chat" in shape else []
    raw = b"".join(r.event(c) for c in [*chunks, *CHUNKS]) + r.closing(USAGE, CHUNKS[-1])
    assert b"[DONE]" not in raw
    assert all(json.loads(e) for e in events(raw))
    assert json.loads(events(raw)[-1])["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize(("shape", "named"), [("openai", False), ("sgp", True), ("sgp_chat", True),
                                              ("sgp_v5", False), ("sgp_v5_chat", False),
                                              ("chat", False)])
def test_stream_error_event_as_each_sdk_reads_it(shape: str, named: bool) -> None:
    """scale-gp raises on ``event: error``; scale-gp-beta skips named events, so it gets the error
    as data; OpenAI's SDK raises on ``data: {"error": ...}`` and stops at [DONE]."""
    raw = RENDERERS[shape](canon("chat" if "chat" in shape else "openai")).error_event(
        {"error": {"message": "boom"}})
    assert raw.startswith(b"event: error\ndata: ") is named
    assert json.loads(events(raw)[0]) == {"error": {"message": "boom"}}
    assert raw.endswith(b"data: [DONE]\n\n") is not shape.startswith("sgp")


def test_chat_stream() -> None:
    ev = stream("chat", [Chunk(role="assistant", text=""), Chunk(text="Hi"),
                         Chunk(text="", finish_reason="stop")], include_usage=True)
    objs = [json.loads(e) for e in ev[:-1]]
    assert ev[-1] == "[DONE]"
    assert objs[0]["object"] == "chat.completion.chunk"
    assert objs[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert objs[1]["choices"][0]["delta"] == {"content": "Hi"}
    assert objs[2]["choices"][0]["finish_reason"] == "stop"
    assert objs[3]["usage"]["total_tokens"] == 6


def test_llamacpp_native_stream_ends_with_its_stop_event_not_done() -> None:
    ev = stream("llamacpp_native", [Chunk(text="a"), Chunk(text="b", finish_reason="length")])
    assert "[DONE]" not in ev
    objs = [json.loads(e) for e in ev]
    assert [o["content"] for o in objs] == ["a", "b", ""]
    assert [o["stop"] for o in objs] == [False, False, True]
    assert objs[-1]["stop_type"] == "limit" and objs[-1]["tokens_predicted"] == 2


# --- the stop scanner ---------------------------------------------------------------------------

@pytest.mark.parametrize(("pieces", "stops", "include", "out", "word"), [
    (["hello world"], ["wor"], False, "hello ", "wor"),
    (["hello world"], ["wor"], True, "hello wor", "wor"),
    (["hel", "lo", " wo", "rld"], ["o w"], False, "hell", "o w"),  # split across pieces
    (["ab", "c"], ["abd"], False, "abc", None),  # a held prefix that was not a stop
    (["x##", "#y"], ["###"], True, "x###", "###"),
    (["aXb"], ["b", "X"], False, "a", "X"),  # the earliest match wins
])
def test_stop_scanner(pieces, stops, include, out, word) -> None:
    sc = StopScanner(stops, include)
    got = "".join(sc.feed(p) for p in pieces)
    if sc.word is None:
        got += sc.flush()
    assert got == out and sc.word == word


def test_stop_scanner_holds_back_only_possible_prefixes() -> None:
    sc = StopScanner(["END"])
    assert sc.feed("abcE") == "abc"
    assert sc.feed("N") == ""
    assert sc.feed("x") == "ENx"
    assert sc.feed("END more") == "" and sc.word == "END"
    assert sc.feed("after") == ""


# --- accounting -------------------------------------------------------------------------------

def test_tally_counts_until_usage_is_reported() -> None:
    t = Tally(prompt_tokens=5)
    t.add(Chunk(text="a"))
    t.add(Chunk(text="b", tokens=3))
    t.add(Chunk(text=""))
    assert t.usage() == Usage(prompt_tokens=5, completion_tokens=4)
    t.add(Chunk(usage=Usage(prompt_tokens=6, completion_tokens=9)))
    assert t.usage().completion_tokens == 9 and t.produced


def test_gather_orders_choices_and_skips_usage_chunks() -> None:
    comp = gather([Chunk(index=1, text="b"), Chunk(index=0, text="a"), Chunk(index=1, text="c",
                                                                          finish_reason="length"),
                   Chunk(usage=USAGE)], USAGE)
    assert [(c.index, c.text, c.finish_reason) for c in comp.choices] == [(0, "a", None), (1, "bc", "length")]


def test_anthropic_text_deltas_are_the_events_their_dicts_encode_to() -> None:
    """A stream's later text pieces take a shortcut (no dicts built): each must still be the
    event Anthropic's SDK reads, JSON escapes included, in the open block and after a new one."""
    r = AnthropicRenderer(CanonicalRequest(kind="chat", model="m", dialect="anthropic", stream=True))
    texts = ["Hi", ' "quoted"\n', "é\u2028", "\\"]
    raw = b"".join(r.event(Chunk(text=t, role="assistant" if i == 0 else None)) for i, t in enumerate(texts))
    raw += r.event(Chunk(tool_calls=[{"index": 0, "id": "c1", "type": "function",
                                      "function": {"name": "f", "arguments": ""}}]))
    raw += r.event(Chunk(text="after"))  # a new text block (index 2) after the tool call's
    deltas = [json.loads(d) for d in events(raw) if '"text_delta"' in d]
    assert deltas == [{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
                      for t in texts] + [
        {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "after"}}]


@pytest.mark.parametrize("shape", ["chat", "sgp_chat", "sgp_v5_chat"])
def test_chat_text_deltas_are_the_bytes_their_dicts_encode_to(shape: str) -> None:
    """A plain text delta takes a shortcut (no dicts built): each must be byte for byte the event
    the general path writes, JSON escapes included, first event or not, any choice index."""
    r = RENDERERS[shape](CanonicalRequest(kind="chat", model="m/x", dialect="chat", stream=True))
    texts = [(0, "Hi"), (0, ' "quoted"\n'), (3, "é\u2028\U0001f600"), (1, "\\"), (0, "</script>")]
    for index, text in texts:
        choice = {"index": index, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
        want = b"data: " + msgspec.json.encode(
            {"id": r.id, "object": "chat.completion.chunk", "created": r.created, "model": "m/x",
             "system_fingerprint": FINGERPRINT, "choices": [choice]}) + b"\n\n"
        assert r.event(Chunk(index=index, text=text)) == want

    def first(ch: Chunk) -> dict:
        return json.loads(r.event(ch)[6:])["choices"][0]

    # What the shortcut must not take: a role, a finish, reasoning, tool calls, logprobs.
    assert first(Chunk(text="a", role="assistant"))["delta"] == {"role": "assistant", "content": "a"}
    assert first(Chunk(text="a", finish_reason="stop"))["finish_reason"] == "stop"
    assert first(Chunk(text="a", reasoning="r"))["delta"] == {"reasoning_content": "r", "content": "a"}
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}
    assert first(Chunk(text="a", tool_calls=[call]))["delta"]["tool_calls"] == [call]
    lp = [TokenLogprob(token="a", logprob=-0.5, top=[])]
    assert first(Chunk(text="a", logprobs=lp))["logprobs"]["content"][0]["token"] == "a"
