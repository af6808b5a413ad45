"""Helpers for the gateway's HTTP tests: settlements recorded, SSE read, a stallable upstream."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from switchyard.core.canonical import Usage
from switchyard.core.config import Config
from switchyard.policies.factory import Policies, build_policies
from tests.fakes.serve import serve_app


@dataclass
class Settled:
    usage: Usage
    status: int
    deployment: str | None


def recording_policies(config: Config) -> tuple[Policies, list[Settled]]:
    """Real policies whose ``settle`` also records what it was given."""
    policies = build_policies(config)
    seen: list[Settled] = []
    settle = policies.policy.settle

    async def recording(ticket, outcome):  # type: ignore[no-untyped-def]
        seen.append(Settled(outcome.usage, outcome.status, outcome.deployment or None))
        await settle(ticket, outcome)

    policies.policy.settle = recording  # type: ignore[method-assign]
    return policies, seen


async def wait_for(cond, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Poll ``cond()`` until true; fail after ``timeout`` seconds (a deadline, not a measurement)."""
    async def poll() -> None:
        while not cond():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(poll(), timeout)


def sse_events(text: str) -> list[str]:
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


def sse_objects(text: str) -> list[dict[str, Any]]:
    return [json.loads(e) for e in sse_events(text) if e != "[DONE]"]


@dataclass
class StallingUpstream:
    """Streams one event, then stalls until ``release`` is set (or the caller hangs up); then streams
    ``more`` events. Records whether it saw its connection closed while stalled or writing."""

    more: int = 3
    release: asyncio.Event = field(default_factory=asyncio.Event)
    first_sent: asyncio.Event = field(default_factory=asyncio.Event)
    saw_close: bool = False
    writes_after_release: int = 0
    finished: bool = False
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> StallingUpstream:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner, self.port = await serve_app(app, shutdown_timeout=1)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        await self._runner.cleanup()

    @staticmethod
    def _event(text: str, finish: str | None = None) -> bytes:
        return b"data: " + json.dumps({"id": "x", "model": "upstream-name", "choices": [
            {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}]}).encode() + b"\n\n"

    def _closed(self, request: web.Request) -> bool:
        t = request.transport
        return t is None or t.is_closing()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(self._event("first"))
        self.first_sent.set()
        while not self.release.is_set():
            if self._closed(request):
                self.saw_close = True
                return resp
            await asyncio.sleep(0.01)
        try:
            for i in range(self.more):
                if self._closed(request):
                    self.saw_close = True
                    return resp
                await resp.write(self._event(f" more{i}", "length" if i == self.more - 1 else None))
                self.writes_after_release += 1
                await asyncio.sleep(0.01)
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            self.finished = True
        except (ConnectionError, RuntimeError):
            self.saw_close = True
        return resp
