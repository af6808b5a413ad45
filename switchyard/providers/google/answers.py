"""Google's generateContent answers read into canonical chunks, whole or streamed (the requests
are written in ``gemini.py``).

Wire facts (google-genai's types): ``candidates[].content.parts``; every safety-family
``finishReason`` is ``content_filter``; a prompt blocked before any candidate
(``promptFeedback.blockReason``, no candidates) is a ``content_filter`` answer, not a failure.
``promptTokenCount`` includes ``cachedContentTokenCount``; thoughts are not in
``candidatesTokenCount``, so completion = candidates + thoughts. Streams (``alt=sse``) have no
end marker: the body's end is the end, and every candidate must have finished by then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from switchyard.core.canonical import Chunk, FinishReason, TokenLogprob, TopLogprob, Usage
from switchyard.providers.wire import WireError

_FILTERED = (
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
    "MODEL_ARMOR",
    "ESCALATION",
    "LANGUAGE",
    "PUP_LIMITED_DISABLED",
    "JAILBREAK",
)
_BROKEN = (
    "MALFORMED_FUNCTION_CALL",
    "UNEXPECTED_TOOL_CALL",
    "TOO_MANY_TOOL_CALLS",
    "MISSING_THOUGHT_SIGNATURE",
    "MALFORMED_RESPONSE",
    "OTHER",
    "IMAGE_OTHER",
    "NO_IMAGE",
    "FINISH_REASON_UNSPECIFIED",
)
# Every value of google-genai's FinishReason; an unknown one is an error finish, never a quiet "stop"
# (agents retry a deterministic block that looks like a clean stop).
FINISH: Mapping[str, FinishReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "CONTINUATION": "length",
    **dict.fromkeys(_FILTERED, "content_filter"),
    **dict.fromkeys(_BROKEN, "error"),
}
RETRYABLE_CODES = frozenset({429, 500, 503, 504})


def whole(raw: bytes) -> list[Chunk]:
    """A whole (non-streamed) 200 answer."""
    ans = _decode(raw, "answer")
    if ans.error is not None:
        raise _error(ans.error, sent=False)
    if not ans.candidates:
        return _blocked(ans)
    out = []
    for i, cand in enumerate(ans.candidates):
        text, calls, thought = _parts_of(cand, {})
        out.append(
            Chunk(
                index=cand.index if cand.index is not None else i,
                text=text,
                reasoning=thought,
                role="assistant",
                tool_calls=calls or None,
                finish_reason=_finish(cand.finishReason, bool(calls)),
                logprobs=_logprobs(cand.logprobsResult),
            )
        )
    out[-1].usage = usage_of(ans.usageMetadata)
    return out


class _Part(msgspec.Struct):
    text: str | None = None
    thought: bool | None = None
    functionCall: dict[str, Any] | None = None


class _Content(msgspec.Struct):
    parts: list[_Part] | None = None


class _LpCandidate(msgspec.Struct):
    token: str = ""
    logProbability: float | None = None


class _Top(msgspec.Struct):
    candidates: list[_LpCandidate] | None = None


class _Logprobs(msgspec.Struct):
    chosenCandidates: list[_LpCandidate] | None = None
    topCandidates: list[_Top] | None = None


class _Candidate(msgspec.Struct):
    content: _Content | None = None
    finishReason: str | None = None
    index: int | None = None
    logprobsResult: _Logprobs | None = None


class _UsageMeta(msgspec.Struct):
    promptTokenCount: int = 0
    candidatesTokenCount: int = 0
    cachedContentTokenCount: int = 0
    thoughtsTokenCount: int = 0
    toolUsePromptTokenCount: int = 0


class _Feedback(msgspec.Struct):
    blockReason: str | None = None


class _Answer(msgspec.Struct):
    candidates: list[_Candidate] | None = None
    promptFeedback: _Feedback | None = None
    usageMetadata: _UsageMeta | None = None
    error: Any = None


_decoder = msgspec.json.Decoder(_Answer)


def _decode(raw: bytes, what: str) -> _Answer:
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError:
        raise WireError(f"sent a malformed {what}") from None


def usage_of(u: _UsageMeta | None) -> Usage | None:
    if u is None:
        return None
    return Usage(
        prompt_tokens=u.promptTokenCount + u.toolUsePromptTokenCount,
        completion_tokens=u.candidatesTokenCount + u.thoughtsTokenCount,
        cached_tokens=u.cachedContentTokenCount,
        reasoning_tokens=u.thoughtsTokenCount,
    )


def _finish(reason: str | None, called: bool) -> FinishReason | None:
    """Gemini says STOP after function calls too."""
    if reason is None:
        return None
    f = FINISH.get(reason, "error")
    return "tool_calls" if f == "stop" and called else f


def _blocked(ans: _Answer) -> list[Chunk]:
    """An answer without candidates: a blocked prompt is a content_filter answer."""
    fb = ans.promptFeedback
    if fb is None or not fb.blockReason:
        raise WireError("sent an answer without any candidate")
    return [
        Chunk(index=0, role="assistant", finish_reason="content_filter", usage=usage_of(ans.usageMetadata))
    ]


def _parts_of(cand: _Candidate, ids: dict[int, int]) -> tuple[str, list[dict[str, Any]], str]:
    """A candidate's text, its function calls, OpenAI-shaped and numbered on from ``ids`` (tool
    calls so far, per candidate, for streams), and its thought parts' text (``Chunk.reasoning``)."""
    thoughts: list[str] = []
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    idx = cand.index or 0
    for p in (cand.content.parts if cand.content is not None else None) or ():
        if p.functionCall is not None:
            k = ids.get(idx, 0)
            ids[idx] = k + 1
            fc = p.functionCall
            calls.append(
                {
                    "index": k,
                    "id": fc.get("id") or f"call_{idx}_{k}",
                    "type": "function",
                    "function": {
                        "name": fc.get("name"),
                        "arguments": msgspec.json.encode(fc.get("args") or {}).decode(),
                    },
                }
            )
        elif p.text:
            (thoughts if p.thought else text).append(p.text)
    return "".join(text), calls, "".join(thoughts)


def _logprobs(lp: _Logprobs | None) -> list[TokenLogprob] | None:
    if lp is None or lp.chosenCandidates is None:
        return None
    tops = lp.topCandidates or []
    return [
        TokenLogprob(
            token=c.token,
            logprob=c.logProbability or 0.0,
            top=[
                TopLogprob(t.token, t.logProbability or 0.0)
                for t in ((tops[i].candidates or []) if i < len(tops) else [])
            ],
        )
        for i, c in enumerate(lp.chosenCandidates)
    ]


def _error(err: Any, *, sent: bool) -> WireError:
    code = err.get("code") if isinstance(err, dict) else None
    said = str(err.get("message") or err.get("status") or "") if isinstance(err, dict) else str(err)
    where = "reported an error mid-stream" if sent else "answered with an error"
    return WireError(
        f"{where} ({code})" if code else where,
        said or None,
        retryable=not sent and code in RETRYABLE_CODES,
        status=429 if code == 429 and not sent else 502,
    )


class GeminiStream:
    """One ``alt=sse`` answer: each event a whole GenerateContentResponse holding the new parts
    of each candidate; usage (cumulative) rides on the last event with a finish."""

    __slots__ = ("_finished", "_n", "_sent", "_tools", "done")

    def __init__(self, n: int) -> None:
        self.done = False  # no end marker: the body's end is the stream's
        self._n = n
        self._finished: set[int] = set()
        self._sent: set[int] = set()  # candidates that have had their first (role) chunk
        self._tools: dict[int, int] = {}

    def feed(self, name: bytes | None, data: bytes) -> list[Chunk]:
        ans = _decode(data, "stream event")
        if ans.error is not None:
            raise _error(ans.error, sent=bool(self._sent))
        if not ans.candidates:
            if ans.promptFeedback is not None and ans.promptFeedback.blockReason:
                self._finished.update(range(self._n))
                self._sent.add(0)
                return _blocked(ans)
            return [Chunk(usage=usage)] if (usage := usage_of(ans.usageMetadata)) and self._finished else []
        out = []
        for i, cand in enumerate(ans.candidates):
            idx = cand.index if cand.index is not None else i
            text, calls, thought = _parts_of(cand, self._tools)
            finish = _finish(cand.finishReason, idx in self._tools)  # any call so far
            if not text and not calls and not thought and finish is None:
                continue
            ch = Chunk(
                index=idx,
                text=text,
                reasoning=thought,
                tool_calls=calls or None,
                finish_reason=finish,
                logprobs=_logprobs(cand.logprobsResult),
            )
            if idx not in self._sent:
                ch.role = "assistant"
                self._sent.add(idx)
            if finish is not None:
                self._finished.add(idx)
            out.append(ch)
        if out and len(self._finished) >= self._n and ans.usageMetadata is not None:
            out[-1].usage = usage_of(ans.usageMetadata)
        return out

    def ending(self) -> str | None:
        if not self._sent and not self._finished:
            return "sent a stream without any candidate"
        if len(self._finished) < self._n:
            return "ended the stream before every candidate finished"
        return None
