"""One request's guards: its placeholders, what fired, the request edited, the answer filtered.

A redaction replaces a match with a typed placeholder (``[EMAIL_1]``; the same value keeps its
placeholder for the whole request). With ``restore`` the placeholders the request was given are
put back in the answer, so the upstream never sees the values and the caller gets its own back.
A block is a 400 that names the guard and the detector, never the text.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable
from dataclasses import replace
from typing import Any

from switchyard.core.canonical import CanonicalRequest, Chunk
from switchyard.core.errors import InvalidRequest
from switchyard.guards.detectors import Detector, detector
from switchyard.guards.rules import Plan, Rule
from switchyard.guards.scan import Hit, Holder, apply, scan
from switchyard.guards.texts import rewrite, texts

# What a redaction leaves, and what restore looks for in the answer.
PLACEHOLDER = detector("placeholder", r"\[[A-Z][A-Z0-9_]{0,40}_\d{1,6}\]")
_RESTORE = Rule(name="restore", action="redact", request=False, response=True, restore=True, detectors=())

GUARDRAILS_HEADER = "x-switchyard-guardrails"
Fired = tuple[str, str, str, str]  # (guard, action, detector, "request" | "response")


class GuardBlocked(InvalidRequest):
    def __init__(self, rule: str, detector: str, where: str) -> None:
        super().__init__(f"guardrail {rule} blocked the {where}: it found {detector} data")
        self.reason = f"guardrail:{rule}"


class GuardRun:
    __slots__ = ("counts", "fired", "plan", "restores", "values")

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.values: dict[tuple[str, str], str] = {}  # (tag, value) -> its placeholder
        self.restores: dict[str, str] = {}  # placeholder -> the caller's value
        self.counts: dict[str, int] = {}
        self.fired: list[Fired] = []  # each (guard, action, detector, direction) once, in order

    # -- what fired -----------------------------------------------------------------------

    def _note(self, rule: Rule, det: str, where: str) -> None:
        f = (rule.name, rule.action, det, where)
        if f not in self.fired:
            self.fired.append(f)

    def header(self) -> str | None:
        """``x-switchyard-guardrails``: ``<name>:<action>`` of each guard that acted, once each, in
        the order they run (model, team, key)."""
        order: dict[str, int] = {}
        for i, r in enumerate(self.plan.rules):
            order.setdefault(r.name, i)
        fired = sorted(self.fired, key=lambda f: order.get(f[0], 0))
        return ",".join(dict.fromkeys(f"{g}:{a}" for g, a, _, _ in fired)) or None

    def _placeholder(self, det: Detector | str, value: str) -> str:
        tag = det.tag if isinstance(det, Detector) else det
        ph = self.values.get((tag, value))
        if ph is None:
            n = self.counts[tag] = self.counts.get(tag, 0) + 1
            ph = self.values[(tag, value)] = f"[{tag}_{n}]"
        return ph

    def _act(self, where: str) -> Callable[[Hit[Rule], str], str]:
        def act(h: Hit[Rule], matched: str) -> str:
            r = h.what
            if r is _RESTORE:
                return self.restores.get(matched, matched)
            self._note(r, h.detector.name, where)
            if r.action == "block":
                raise GuardBlocked(r.name, h.detector.name, where)
            if r.action == "log":
                return matched
            ph = self._placeholder(h.detector, matched)
            if r.restore and where == "request":
                self.restores[ph] = matched
            return ph
        return act

    # -- the request ------------------------------------------------------------------------

    async def request(self, req: CanonicalRequest) -> CanonicalRequest:
        entries, act = self.plan.request, self._act("request")
        found: dict[str, list[tuple[int, int, str]]] = {}
        if self.plan.presidio:
            from switchyard.guards.presidio import find
            found = dict(await asyncio.to_thread(lambda: {t: find(t) for t in texts(req) if t}))

        def edit(text: str) -> str:
            hits, _ = scan(entries, text) if entries else ([], 0)
            if found.get(text):
                hits = self._with_presidio(hits, found[text])
            return apply(text, hits, act) if hits else text

        return rewrite(req, edit)

    def _with_presidio(self, hits: list[Hit[Rule]], found: list[tuple[int, int, str]]) -> list[Hit[Rule]]:
        rule = self.plan.presidio[0]
        extra = [Hit(s, e, rule, Detector(entity.lower(), PLACEHOLDER.pattern)) for s, e, entity in found]
        merged: list[Hit[Rule]] = []
        for h in sorted([*hits, *extra], key=lambda h: (h.start, -h.end)):
            if not merged or h.start >= merged[-1].end:
                merged.append(h)
        return merged

    # -- the answer -------------------------------------------------------------------------

    def answers(self) -> bool:
        """Whether the answer must pass through ``answer``."""
        return bool(self.plan.response) or bool(self.restores)

    async def answer(self, chunks: AsyncGenerator[Chunk, None]) -> AsyncGenerator[Chunk, None]:
        """``chunks`` with each choice's text (and reasoning) filtered as it streams, held back only
        while a match may be forming; tool call arguments filtered per piece."""
        entries = self.plan.response + (((PLACEHOLDER, _RESTORE),) if self.restores else ())
        act = self._act("response")
        holders: dict[tuple[int, bool], Holder[Rule]] = {}

        def feed(index: int, reasoning: bool, text: str, final: bool) -> str:
            h = holders.get((index, reasoning))
            if h is None:
                if not text:
                    return ""
                h = holders[(index, reasoning)] = Holder(entries, act)
            return h.feed(text, final)

        def args(c: dict[str, Any]) -> dict[str, Any]:
            fn = c.get("function")
            if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str) or not fn["arguments"]:
                return c
            text = fn["arguments"]
            hits, _ = scan(entries, text)
            # A value put back inside a JSON string is written as one.
            return {**c, "function": {**fn, "arguments": apply(
                text, hits, lambda h, m: json.dumps(act(h, m))[1:-1])}} if hits else c

        try:
            async for ch in chunks:
                final = ch.finish_reason is not None
                counted = ch.tokens if ch.tokens is not None else int(
                    bool(ch.text or ch.tool_calls or ch.thinking or ch.reasoning))
                yield replace(
                    ch, text=feed(ch.index, False, ch.text, final),
                    reasoning=feed(ch.index, True, ch.reasoning, final),
                    tool_calls=[args(c) for c in ch.tool_calls] if ch.tool_calls else ch.tool_calls,
                    logprobs=None, tokens=counted)  # a logprob names its token: it would show the text
            for (index, reasoning), h in holders.items():
                rest = h.feed("", final=True)
                if rest:
                    yield (Chunk(index=index, tokens=0, reasoning=rest) if reasoning
                           else Chunk(index=index, tokens=0, text=rest))
        finally:
            await chunks.aclose()
