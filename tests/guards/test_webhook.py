"""The webhook guard against a real HTTP service on loopback that allows, denies, modifies,
stalls and fails; asked beside the upstream call, which answers nothing before the verdict; told
no credential."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from switchyard.core.config import parse_config
from tests.fakes.serve import serve_app
from tests.fakes.upstream import Behaviour, FakeUpstream
from tests.gateway.conftest import KEY, MASTER, serve
from tests.guards.helpers import ANTHROPIC, MODEL, streamed_text

UPSTREAM_KEY = "sk-upstream-credential-0123456789"


@dataclass
class Hook:
    """Answers each call with ``verdict`` (after ``stall`` seconds); ``status`` other than 200 fails."""

    verdict: dict[str, Any] = field(default_factory=lambda: {"action": "allow"})
    stall: float = 0.0
    status: int = 200
    seen: list[tuple[dict[str, str], dict[str, Any], int]] = field(default_factory=list)
    upstream: FakeUpstream | None = None

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        await asyncio.sleep(self.stall)
        # How many upstream calls had begun when the verdict was given: the call runs beside it.
        self.seen.append((dict(request.headers), body, len(self.upstream.requests) if self.upstream else -1))
        if self.verdict.get("action") == "modify":
            return web.json_response({"action": "modify", "texts": [t.upper() for t in body["texts"]]})
        return web.json_response(self.verdict, status=self.status)


@asynccontextmanager
async def rig(hook: Hook, **guard: Any) -> AsyncIterator[tuple[Any, FakeUpstream]]:
    app = web.Application()
    app.router.add_post("/check", hook.handle)
    runner, port = await serve_app(app)
    try:
        async with FakeUpstream() as up:
            hook.upstream = up
            config = parse_config({
                "logging": {"access": False}, "master_key": MASTER,
                "models": [{"name": MODEL, "deployments": [{"name": "d1", "dialect": "openai",
                                                            "base_url": up.url, "api_key": UPSTREAM_KEY}],
                            "guardrails": [{"name": "ops", "webhook": f"http://127.0.0.1:{port}/check",
                                            "timeout": 0.5, **guard}]}],
                "teams": [{"name": "t"}], "keys": [{"id": "k1", "team": "t", "key": KEY}]})
            async with serve(config) as gw:
                yield gw, up
    finally:
        await runner.cleanup()


def ask(text: str = "hello there", **kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": text}], **kw}


async def test_allow_runs_beside_the_upstream_call_and_is_told_no_credential() -> None:
    hook = Hook(stall=0.2)
    async with rig(hook, direction="request") as (gw, _):
        r = await gw.post("/v1/chat/completions", json=ask())
    assert r.status_code == 200, r.text
    assert "x-switchyard-guardrails" not in r.headers  # an allow is not an action
    headers, body, upstream_calls = hook.seen[0]
    assert upstream_calls == 1  # the upstream had been called before the verdict came
    assert body == {"guardrail": "ops", "direction": "request", "texts": ["hello there"], "model": MODEL,
                    "team": "t", "key_id": "k1", "request_id": r.headers["x-request-id"]}
    sent = json.dumps(headers) + json.dumps(body)
    assert KEY not in sent and UPSTREAM_KEY not in sent
    assert "authorization" not in {h.lower() for h in headers}


async def test_deny_is_a_400_with_its_reason_in_the_callers_shape() -> None:
    hook = Hook(verdict={"action": "deny", "reason": "no customer names, please"})
    async with rig(hook, direction="request") as (gw, _):
        openai = await gw.post("/v1/chat/completions", json=ask(stream=True))
        claude = await gw.post("/v1/messages", headers=ANTHROPIC, json=ask())
    assert openai.status_code == claude.status_code == 400
    assert openai.json()["error"]["message"] == "guardrail ops denied the request: no customer names, please"
    assert claude.json()["error"]["message"] == "guardrail ops denied the request: no customer names, please"
    assert openai.headers["x-switchyard-guardrails"] == "ops:deny"
    assert "w0" not in openai.text  # no answer byte went out


async def test_modify_sends_the_changed_request() -> None:
    hook = Hook(verdict={"action": "modify"})
    async with rig(hook, direction="request") as (gw, up):
        r = await gw.post("/v1/chat/completions", json=ask("quiet please"))
    assert r.status_code == 200, r.text
    assert up.requests[-1].body["messages"][0]["content"] == "QUIET PLEASE"
    assert r.headers["x-switchyard-guardrails"] == "ops:modify"


async def test_a_stall_past_the_deadline_fails_closed_or_open() -> None:
    async with rig(Hook(stall=2), direction="request") as (gw, _):
        closed = await gw.post("/v1/chat/completions", json=ask())
    async with rig(Hook(stall=2), direction="request", on_error="allow") as (gw, _):
        opened = await gw.post("/v1/chat/completions", json=ask())
    assert closed.status_code == 400 and "guardrail ops denied the request: its webhook failed" in closed.text
    assert opened.status_code == 200 and opened.headers["x-switchyard-guardrails"] == "ops:error"


async def test_a_failing_webhook_fails_closed_or_open() -> None:
    async with rig(Hook(status=500), direction="request") as (gw, _):
        closed = await gw.post("/v1/chat/completions", json=ask())
    async with rig(Hook(verdict={"action": "perhaps"}), direction="request", on_error="allow") as (gw, _):
        opened = await gw.post("/v1/chat/completions", json=ask())
    assert closed.status_code == 400 and opened.status_code == 200


async def test_the_answer_is_asked_about_whole_and_streamed() -> None:
    hook = Hook(verdict={"action": "modify"})
    async with rig(hook, direction="response") as (gw, up):
        up.default = Behaviour(text="all quiet here")
        whole = await gw.post("/v1/chat/completions", json=ask())
        stream = await gw.post("/v1/chat/completions", json=ask(stream=True))
    assert whole.json()["choices"][0]["message"]["content"] == "ALL QUIET HERE"
    assert streamed_text(stream.text) == "ALL QUIET HERE"
    assert [b["direction"] for _, b, _ in hook.seen] == ["response", "response"]
    deny = Hook(verdict={"action": "deny", "reason": "off topic"})
    async with rig(deny, direction="response") as (gw, _):
        r = await gw.post("/v1/chat/completions", json=ask(stream=True))
    assert r.status_code == 400 and "guardrail ops denied the response: off topic" in r.text
