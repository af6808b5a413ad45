"""The operator's own check: an HTTP service asked for a verdict on a request's or an answer's text.

The gateway POSTs JSON ``{"guardrail", "direction", "texts", "model", "team", "key_id",
"request_id"}`` (no credential of any kind: no caller key, no upstream key, no header of the
caller's) and reads ``{"action": "allow"}``, ``{"action": "deny", "reason": "..."}`` or
``{"action": "modify", "texts": [...]}`` (as many texts, in the same order). A late, failed or
malformed answer is an error: ``on_error`` says whether the request goes on (allow) or is refused
(deny).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from switchyard.guards.rules import Rule

log = logging.getLogger("switchyard")
REASON_CHARS = 300  # of a deny's reason shown to the caller


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Literal["allow", "deny", "modify", "error"]
    reason: str = ""
    texts: list[str] | None = None


class Webhooks:
    """The webhook guards' calls, over one connection pool (opened at the first call, closed with
    the gateway): a guarded request does not pay a new connection per webhook."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None

    async def ask(self, rule: Rule, direction: str, texts: list[str], about: dict[str, str]) -> Verdict:
        assert rule.webhook is not None
        body = {"guardrail": rule.name, "direction": direction, "texts": texts, **about}
        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=False)
        try:
            r = await asyncio.wait_for(self._client.post(rule.webhook, json=body, timeout=rule.timeout),
                                       rule.timeout)
            return _read(r, len(texts))
        except (httpx.HTTPError, TimeoutError, ValueError) as e:
            # The webhook's URL and the error's class, never the texts.
            log.warning("guardrail %s: its webhook failed (%s); on_error: %s", rule.name, type(e).__name__,
                        "allow" if rule.fail_open else "deny")
            return Verdict("error")

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _read(r: httpx.Response, n: int) -> Verdict:
    if r.status_code != 200:
        raise ValueError(f"status {r.status_code}")
    v: Any = r.json()
    action = v.get("action") if isinstance(v, dict) else None
    if action == "allow":
        return Verdict("allow")
    if action == "deny":
        reason = v.get("reason")
        return Verdict("deny", reason[:REASON_CHARS] if isinstance(reason, str) else "")
    if action == "modify":
        texts = v.get("texts")
        if isinstance(texts, list) and len(texts) == n and all(isinstance(t, str) for t in texts):
            return Verdict("modify", texts=texts)
    raise ValueError("not a verdict")
