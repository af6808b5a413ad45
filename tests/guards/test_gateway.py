"""Guardrails through the real gateway, in front of the calibrated fake upstream (a real HTTP
server on loopback): each action on each dialect's text, whole and streamed answers, mask and
restore, the order model -> team -> key, and x-switchyard-guardrails."""

from __future__ import annotations

import json

from switchyard.guards.rules import Guardrails
from tests.fakes.upstream import Behaviour, FakeUpstream
from tests.gateway.conftest import KEY, serve
from tests.guards.helpers import ANTHROPIC, MODEL, guarded, streamed_text

MAIL = "jane.doe@example.com"
CARD = "4111 1111 1111 1111"
AWS = "AKIAIOSFODNN7EXAMPLE"
PII = [{"name": "pii", "detectors": ["email", "payment_card"], "action": "redact"}]


def sent(up: FakeUpstream) -> str:
    return json.dumps(up.requests[-1].body)


async def test_chat_text_system_tools_and_results_are_redacted() -> None:
    messages = [
        {"role": "system", "content": f"The operator is {MAIL}"},
        {"role": "user", "content": [{"type": "text", "text": f"pay with {CARD}"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "mail", "arguments": json.dumps({"to": MAIL})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": f"sent to {MAIL}"},
        {"role": "user", "content": "thanks"}]
    async with FakeUpstream() as up, serve(guarded(up.url, model=PII)) as gw:
        r = await gw.post("/v1/chat/completions", json={"model": MODEL, "messages": messages,
                                                         "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-guardrails"] == "pii:redact"
    body = up.requests[-1].body
    assert MAIL not in sent(up) and "4111" not in sent(up)
    assert body["messages"][0]["content"] == "The operator is [EMAIL_1]"  # one value, one placeholder
    assert body["messages"][1]["content"][0]["text"] == "pay with [PAYMENT_CARD_1]"
    assert json.loads(body["messages"][2]["tool_calls"][0]["function"]["arguments"]) == {"to": "[EMAIL_1]"}
    assert body["messages"][3]["content"] == "sent to [EMAIL_1]"


async def test_anthropic_system_prompt_and_tool_results_are_redacted() -> None:
    async with FakeUpstream() as up, serve(guarded(up.url, model=PII)) as gw:
        r = await gw.post("/v1/messages", headers=ANTHROPIC, json={
            "model": MODEL, "max_tokens": 2, "system": [{"type": "text", "text": f"operator {MAIL}"}],
            "messages": [
                {"role": "user", "content": "look it up"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "card",
                                                   "input": {"q": "x"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                              "content": [{"type": "text", "text": CARD}]}]}]})
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-guardrails"] == "pii:redact"
    assert MAIL not in sent(up) and "4111" not in sent(up)
    assert "[EMAIL_1]" in sent(up) and "[PAYMENT_CARD_1]" in sent(up)


async def test_responses_completions_and_embeddings_inputs_are_redacted() -> None:
    async with FakeUpstream() as up, serve(guarded(up.url, model=PII)) as gw:
        r = await gw.post("/v1/responses", json={"model": MODEL, "instructions": f"cc {MAIL}",
                                                  "input": [{"role": "user", "content": f"card {CARD}"}]})
        assert r.status_code == 200, r.text
        assert MAIL not in sent(up) and "4111" not in sent(up) and "[EMAIL_1]" in sent(up)
        r = await gw.post("/v1/completions", json={"model": MODEL, "prompt": f"to {MAIL}", "max_tokens": 2})
        assert r.status_code == 200, r.text
        assert up.requests[-1].body["prompt"] in ("to [EMAIL_1]", ["to [EMAIL_1]"])
        r = await gw.post("/v1/embeddings", json={"model": "vendor/embed", "input": [f"a {MAIL}", "plain"]})
        assert r.status_code == 200, r.text
        assert up.requests[-1].body["input"] == ["a [EMAIL_1]", "plain"]
        assert r.headers["x-switchyard-guardrails"] == "pii:redact"


async def test_a_block_is_a_400_in_the_callers_shape_naming_the_guard_not_the_text() -> None:
    block = [{"name": "no-keys", "detectors": ["secret"], "action": "block", "direction": "request"}]
    async with FakeUpstream() as up, serve(guarded(up.url, key=block)) as gw:
        openai = await gw.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": f"my key {AWS}"}]})
        claude = await gw.post("/v1/messages", headers=ANTHROPIC, json={
            "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": f"my key {AWS}"}]})
        fine = await gw.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "no key here"}], "max_tokens": 2})
    assert openai.status_code == claude.status_code == 400
    assert openai.json()["error"]["message"] == "guardrail no-keys blocked the request: it found secret data"
    assert claude.json()["type"] == "error" and claude.json()["error"]["type"] == "invalid_request_error"
    assert "guardrail no-keys" in claude.json()["error"]["message"]
    for r in (openai, claude):
        assert AWS not in r.text and r.headers["x-switchyard-guardrails"] == "no-keys:block"
    assert len(up.requests) == 1  # only the clean request went up
    assert fine.status_code == 200 and "x-switchyard-guardrails" not in fine.headers


async def test_log_records_only_and_guards_run_model_team_key() -> None:
    async with FakeUpstream() as up, serve(guarded(
            up.url, model=[{"name": "m", "detectors": ["ip_address"], "action": "log"}],
            team=[{"name": "t", "detectors": ["email"], "action": "redact"}],
            key=[{"name": "k", "detectors": ["us_ssn"], "action": "log"}])) as gw:
        r = await gw.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 2, "messages": [
            {"role": "user", "content": f"ssn 123-45-6789 at 10.0.0.1 mail {MAIL}"}]})
    assert r.status_code == 200, r.text
    assert r.headers["x-switchyard-guardrails"] == "m:log,t:redact,k:log"
    assert up.requests[-1].body["messages"][0]["content"] == "ssn 123-45-6789 at 10.0.0.1 mail [EMAIL_1]"


async def test_answers_are_redacted_whole_and_streamed() -> None:
    guard = [{"name": "out", "detectors": ["secret"], "direction": "response"}]
    text = f"use {AWS} now"
    async with FakeUpstream() as up, serve(guarded(up.url, model=guard)) as gw:
        up.script.append(Behaviour(text=text))
        whole = await gw.post("/v1/chat/completions", json={"model": MODEL, "messages": [
            {"role": "user", "content": f"echo {AWS}"}]})
        assert up.requests[-1].body["messages"][0]["content"] == f"echo {AWS}"  # response only
        up.script.append(Behaviour(pieces=["use AKIAIOSF", "ODNN7EXA", "MPLE now"]))
        stream = await gw.post("/v1/chat/completions", json={"model": MODEL, "stream": True, "messages": [
            {"role": "user", "content": "hi"}]})
        # A stream's headers leave with its first chunk, which waits for the first text it can show.
        up.script.append(Behaviour(pieces=["AKIA", "IOSFODNN7EXAMPLE", " is it"]))
        first = await gw.post("/v1/chat/completions", json={"model": MODEL, "stream": True, "messages": [
            {"role": "user", "content": "hi"}], "stream_options": {"include_usage": True}})
    assert whole.json()["choices"][0]["message"]["content"] == "use [SECRET_1] now"
    assert whole.headers["x-switchyard-guardrails"] == "out:redact"
    assert streamed_text(stream.text) == "use [SECRET_1] now" and AWS[4:12] not in stream.text
    assert streamed_text(first.text) == "[SECRET_1] is it"
    assert first.headers["x-switchyard-guardrails"] == "out:redact"
    events = [json.loads(line[6:]) for line in first.text.splitlines() if line.startswith("data: {")]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"  # carried to the first chunk shown
    assert events[-1]["usage"]["completion_tokens"] == 3  # as the upstream said: nothing lost


async def test_mask_and_restore_round_trips_whole_and_streamed() -> None:
    guard = [{"name": "pii", "detectors": ["email"], "restore": True, "direction": "request"}]
    ask = {"model": MODEL, "messages": [{"role": "user", "content": f"write to {MAIL} and b@x.org"}]}
    async with FakeUpstream() as up, serve(guarded(up.url, model=guard)) as gw:
        up.script.append(Behaviour(echo=True))
        whole = await gw.post("/v1/chat/completions", json=ask)
        assert up.requests[-1].body["messages"][0]["content"] == "write to [EMAIL_1] and [EMAIL_2]"
        up.script.append(Behaviour(pieces=["Sure: [EM", "AIL_1", "] and [EMAIL_2", "], not [EMAIL_9]."]))
        stream = await gw.post("/v1/chat/completions", json={**ask, "stream": True})
        up.script.append(Behaviour(pieces=["Sure: [EMAIL", "_1]"]))
        claude = await gw.post("/v1/messages", headers=ANTHROPIC,
                               json={**ask, "stream": True, "max_tokens": 9})
    assert whole.json()["choices"][0]["message"]["content"] == f"write to {MAIL} and b@x.org"
    assert whole.headers["x-switchyard-guardrails"] == "pii:redact"
    assert streamed_text(stream.text) == f"Sure: {MAIL} and b@x.org, not [EMAIL_9]."
    assert streamed_text(claude.text) == f"Sure: {MAIL}"


async def test_no_guard_no_work() -> None:
    """Without guardrails the gateway's one check says so; nothing is resolved per request."""
    async with FakeUpstream() as up:
        plain = Guardrails(guarded(up.url))
        assert not plain.any and plain.plan(MODEL, "t", "k1") is None
        on = Guardrails(guarded(up.url, team=PII))
        assert on.plan(MODEL, "t", "k1") is on.plan(MODEL, "t", "k1")  # built once, then cached
        async with serve(guarded(up.url)) as gw:
            r = await gw.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 2, "messages": [
                {"role": "user", "content": MAIL}]}, headers={"authorization": f"Bearer {KEY}"})
    assert r.status_code == 200 and "x-switchyard-guardrails" not in r.headers
    assert up.requests[-1].body["messages"][0]["content"] == MAIL


def mail_tool(value: str) -> dict[str, object]:
    return {"tools": [{"type": "function", "function": {"name": "mail", "parameters": {
        "type": "object", "properties": {"to": {"type": "string", "enum": [value]}}, "required": ["to"]}}}],
        "tool_choice": {"type": "function", "function": {"name": "mail"}}}


def streamed_args(body: str) -> str:
    out = []
    for line in body.splitlines():
        if line.startswith("data: {"):
            ev = json.loads(line[6:])
            if (ev.get("delta") or {}).get("type") == "input_json_delta":
                out.append(ev["delta"]["partial_json"])
            for c in ev.get("choices") or []:
                out += [(d.get("function") or {}).get("arguments") or ""
                        for d in (c.get("delta") or {}).get("tool_calls") or []]
    return "".join(out)


async def test_tool_call_arguments_split_across_deltas_are_redacted_and_restored() -> None:
    """The fake streams a call's arguments in two halves: the address is cut in two."""
    out = [{"name": "out", "detectors": ["email"], "direction": "response"}]
    back = [{"name": "pii", "detectors": ["email"], "restore": True, "direction": "request"}]
    ask = {"model": MODEL, "max_tokens": 30, "messages": [{"role": "user", "content": f"mail {MAIL}"}]}
    async with FakeUpstream() as up, serve(guarded(up.url, model=out, team=back)) as gw:
        whole = await gw.post("/v1/chat/completions", json={**ask, **mail_tool("ann.lee@example.org")})
        chat = await gw.post("/v1/chat/completions", json={**ask, **mail_tool("ann.lee@example.org"),
                                                            "stream": True})
        # The upstream calls the tool with the placeholder it was given: the caller gets its own value.
        claude = await gw.post("/v1/messages", headers=ANTHROPIC, json={
            **ask, "stream": True, "tools": [{"name": "mail", "input_schema": {
                "type": "object", "properties": {"to": {"type": "string", "enum": ["[EMAIL_1]"]}},
                "required": ["to"]}}], "tool_choice": {"type": "tool", "name": "mail"}})
    assert up.requests[0].body["messages"][0]["content"] == "mail [EMAIL_1]"
    call = whole.json()["choices"][0]["message"]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"to": "[EMAIL_2]"}
    assert json.loads(streamed_args(chat.text)) == {"to": "[EMAIL_2]"} and "ann.lee" not in chat.text
    assert json.loads(streamed_args(claude.text)) == {"to": MAIL}
