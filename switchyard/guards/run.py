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
from typing import Any

from switchyard.core.canonical import CanonicalRequest, Chunk, replace
from switchyard.core.errors import InvalidRequest
from switchyard.guards.detectors import Detector, detector
from switchyard.guards.rules import Plan, Rule
from switchyard.guards.scan import Hit, Holder, apply, scan
from switchyard.guards.texts import put, rewrite, texts
from switchyard.guards.webhook import Verdict, Webhooks

# What a redaction leaves, and what restore looks for in the answer.
PLACEHOLDER = detector("placeholder", r"\[[A-Z][A-Z0-9_]{0,40}_\d{1,6}\]")
_RESTORE = Rule(name="restore", action="redact", request=False, response=True, restore=True, detectors=())

GUARDRAILS_HEADER = "x-switchyard-guardrails"
Fired = tuple[str, str, str, str]  # (guard, action, detector, "request" | "response")


class GuardBlocked(InvalidRequest):
    def __init__(self, rule: str, detector: str, where: str) -> None:
        super().__init__(f"guardrail {rule} blocked the {where}: it found {detector} data")
        self.reason = f"guardrail:{rule}"


class GuardDenied(InvalidRequest):
    """A webhook's deny, with its reason (or, failing closed, that it failed)."""

    def __init__(self, rule: str, reason: str, where: str) -> None:
        super().__init__(f"guardrail {rule} denied the {where}" + (f": {reason}" if reason else ""))
        self.reason = f"guardrail:{rule}"


Restart = Callable[[CanonicalRequest], AsyncGenerator[Chunk, None]]


class GuardRun:
    __slots__ = ("about", "counts", "fired", "plan", "restores", "values", "verdict", "webhooks")

    def __init__(self, plan: Plan, webhooks: Webhooks, about: dict[str, str] | None = None) -> None:
        self.plan = plan
        self.webhooks = webhooks  # the gateway's one pool for webhook guards
        self.about = about or {}  # model, team, key_id, request_id: what a webhook is told
        # The request webhooks' verdict, asked beside the upstream call: None (go on), a request
        # to send instead, or the error to answer with.
        self.verdict: asyncio.Task[CanonicalRequest | GuardDenied | None] | None = None
        self.values: dict[tuple[str, str], str] = {}  # (tag, value) -> its placeholder
        self.restores: dict[str, str] = {}  # placeholder -> the caller's value
        self.counts: dict[str, int] = {}
        self.fired: list[Fired] = []  # each (guard, action, detector, direction) once, in order

    # -- what fired -----------------------------------------------------------------------

    def _note(self, rule: Rule, det: str, where: str, action: str | None = None) -> None:
        f = (rule.name, action or rule.action, det, where)
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

        req = rewrite(req, edit)
        if self.plan.ask_request:
            self.verdict = asyncio.create_task(self._ask(req))
        return req

    async def _ask(self, req: CanonicalRequest) -> CanonicalRequest | GuardDenied | None:
        """Each request webhook in turn (a modify is what the next one sees)."""
        changed = None
        for rule in self.plan.ask_request:
            v = await self.webhooks.ask(rule, "request", texts(req), self.about)
            denied = self._heard(rule, v, "request")
            if denied is not None:
                return denied
            if v.action == "modify" and v.texts is not None:
                req = changed = put(req, v.texts)
        return changed

    def close(self) -> None:
        """A request that ends without its upstream call: its webhooks need not answer."""
        if self.verdict is not None:
            self.verdict.cancel()

    def _heard(self, rule: Rule, v: Verdict, where: str) -> GuardDenied | None:
        """Notes a webhook's verdict; the error to answer with when it refuses (or, failing
        closed, failed)."""
        if v.action != "allow":
            self._note(rule, "webhook", where, v.action)
        if v.action == "deny" or (v.action == "error" and not rule.fail_open):
            return GuardDenied(rule.name, v.reason if v.action == "deny" else "its webhook failed", where)
        return None

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
        return bool(self.plan.response or self.restores or self.verdict or self.plan.ask_response)

    async def answer(self, chunks: AsyncGenerator[Chunk, None], stream: bool,
                     restart: Restart | None = None) -> AsyncGenerator[Chunk, None]:
        """The answer the caller may read: nothing before the request webhooks' verdict (the
        upstream call runs beside them; a modify sends the changed request instead, through
        ``restart``), then the detectors' filter, then the answer webhooks' verdict."""
        current = chunks
        try:
            if self.verdict is not None:
                current = await self._after_verdict(chunks, restart)
            filtered = self._filter(current, stream)
            if self.plan.ask_response:
                filtered = self._asked(filtered)
            async for ch in filtered:
                yield ch
        finally:
            await current.aclose()
            if current is not chunks:
                await chunks.aclose()

    async def _after_verdict(self, chunks: AsyncGenerator[Chunk, None],
                             restart: Restart | None) -> AsyncGenerator[Chunk, None]:
        assert self.verdict is not None
        first = asyncio.ensure_future(anext(chunks, None))  # the upstream call goes on beside
        try:
            verdict = await self.verdict
        except BaseException:  # the caller left (or a bug): the upstream call stops too
            first.cancel()
            await asyncio.wait([first])
            raise
        if verdict is None:
            return _then(first, chunks)
        first.cancel()
        await asyncio.wait([first])
        if not first.cancelled():
            first.exception()  # the upstream's error, if it failed: not the caller's answer now
        await chunks.aclose()
        if isinstance(verdict, GuardDenied):
            raise verdict
        assert restart is not None
        return restart(verdict)

    async def _asked(self, chunks: AsyncGenerator[Chunk, None]) -> AsyncGenerator[Chunk, None]:
        """The whole answer, held until each answer webhook has said allow (or modify)."""
        got = [ch async for ch in chunks]
        choices = sorted({ch.index for ch in got if ch.text})
        said = ["".join(ch.text for ch in got if ch.index == i) for i in choices]
        for rule in self.plan.ask_response:
            v = await self.webhooks.ask(rule, "response", said, self.about)
            denied = self._heard(rule, v, "response")
            if denied is not None:
                raise denied
            if v.action == "modify" and v.texts is not None:
                said = v.texts
        new = dict(zip(choices, said, strict=True))
        for ch in got:
            if ch.text and ch.index in new:  # a choice's text goes out whole, in its first chunk
                ch = replace(ch, text=new.pop(ch.index))
            elif ch.text:
                ch = replace(ch, text="")
            yield ch

    async def _filter(self, chunks: AsyncGenerator[Chunk, None], stream: bool) -> AsyncGenerator[Chunk, None]:
        """``chunks`` with each choice's text, reasoning and tool call arguments filtered, held back
        only while a match may be forming. A streamed call's arguments are held per call and let go
        when the next call begins or the choice finishes (so each call's pieces stay in its own
        block); a whole answer's calls are read whole."""
        entries = self.plan.response + (((PLACEHOLDER, _RESTORE),) if self.restores else ())
        act = self._act("response")

        def in_json(h: Hit[Rule], m: str) -> str:  # a value put back in a JSON string is written as one
            return json.dumps(act(h, m))[1:-1]

        holders: dict[tuple[int, str | int], Holder[Rule]] = {}
        calls: dict[int, list[int]] = {}  # choice -> its calls' stream indexes, in order

        def feed(index: int, what: str | int, text: str, final: bool) -> str:
            h = holders.get((index, what))
            if h is None:
                if not text:
                    return ""
                h = holders[(index, what)] = Holder(entries, in_json if isinstance(what, int) else act)
            return h.feed(text, final)

        def rest(index: int, k: int) -> dict[str, Any] | None:
            left = feed(index, k, "", True)
            return {"index": k, "function": {"arguments": left}} if left else None

        def args(index: int, c: dict[str, Any]) -> list[dict[str, Any]]:
            fn = c.get("function")
            k = c.get("index")
            out: list[dict[str, Any]] = []
            if stream and isinstance(k, int):
                seen = calls.setdefault(index, [])
                if k not in seen:  # a new call: the ones before it are complete
                    out += [r for j in seen if (r := rest(index, j)) is not None]
                    seen.append(k)
            if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str) or not fn["arguments"]:
                return [*out, c]
            if stream and isinstance(k, int):
                text = feed(index, k, fn["arguments"], False)
            else:
                hits, _ = scan(entries, fn["arguments"])
                text = apply(fn["arguments"], hits, in_json)
            return [*out, c if text == fn["arguments"] else {**c, "function": {**fn, "arguments": text}}]

        def tools(ch: Chunk, final: bool) -> list[dict[str, Any]] | None:
            out = [d for c in ch.tool_calls or () for d in args(ch.index, c)]
            if final:
                out += [r for k in calls.pop(ch.index, ()) if (r := rest(ch.index, k)) is not None]
            return out or ch.tool_calls

        try:
            # Until something can be shown, chunks wait here whole (their tokens and role carried
            # to the first one that goes): a stream's headers leave with its first chunk, so they
            # name the guards that acted on what it begins with.
            held_tokens, role = 0, None
            async for ch in chunks:
                final = ch.finish_reason is not None
                counted = ch.tokens if ch.tokens is not None else int(
                    bool(ch.text or ch.tool_calls or ch.thinking or ch.reasoning))
                out = replace(
                    ch, text=feed(ch.index, "text", ch.text, final),
                    reasoning=feed(ch.index, "reasoning", ch.reasoning, final),
                    tool_calls=tools(ch, final),
                    logprobs=None, tokens=counted)  # a logprob names its token: it would show the text
                if held_tokens >= 0:  # nothing has gone yet
                    if not (out.text or out.reasoning or out.tool_calls or out.finish_reason or out.usage
                            or out.thinking or out.embeddings is not None):
                        held_tokens, role = held_tokens + counted, role or out.role
                        continue
                    out.tokens, out.role = counted + held_tokens, out.role or role
                    held_tokens = -1
                yield out
            if held_tokens > 0:  # an answer that showed nothing still produced these
                yield Chunk(tokens=held_tokens)
            for index in {i for i, _ in holders}:  # an answer that ended without a finish
                left = [r for k in calls.pop(index, ()) if (r := rest(index, k)) is not None]
                text, reasoning = feed(index, "text", "", True), feed(index, "reasoning", "", True)
                if left or text or reasoning:
                    yield Chunk(index=index, tokens=0, text=text, reasoning=reasoning,
                                tool_calls=left or None)
        finally:
            await chunks.aclose()


async def _then(first: asyncio.Future[Chunk | None],
                rest: AsyncGenerator[Chunk, None]) -> AsyncGenerator[Chunk, None]:
    ch = await first
    if ch is None:
        return
    yield ch
    async for ch in rest:
        yield ch
