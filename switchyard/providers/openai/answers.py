"""Read an upstream's OpenAI-shaped answers (completions and chat, whole or streamed) into
canonical chunks. llama.cpp, mistral.rs, vLLM, Fireworks and SGP all answer in this shape; SGP and
chat put logprobs in the chat form, the others in the legacy form."""

from __future__ import annotations

from typing import Any

import msgspec

from switchyard.core.canonical import Chunk, TokenLogprob, TopLogprob, Usage
from switchyard.dialects.embeddings import floats_b64


class _Details(msgspec.Struct):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _Details | None = None


class _Message(msgspec.Struct):
    content: str | None = None
    role: str | None = None
    tool_calls: list[Any] | None = None
    # Reasoning as text: DeepSeek, llama.cpp and vLLM's reasoning parsers say reasoning_content,
    # newer vLLM and OpenRouter reasoning (Any: a server whose field is an object still reads).
    reasoning_content: Any = None
    reasoning: Any = None


class _Choice(msgspec.Struct):
    index: int = 0
    text: str | None = None
    delta: _Message | None = None
    message: _Message | None = None
    finish_reason: str | None = None
    logprobs: Any = None


class Answer(msgspec.Struct):
    """The fields of an OpenAI-shaped answer (or stream event) the gateway reads; the rest of
    the object is skipped by the decoder without being built. ``error``: an upstream that failed
    after sending 200 (or mid-stream) says so here."""

    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: Any = None


# strict=False: "index": "0" and the like from a lax upstream still read.
decode_answer = msgspec.json.Decoder(Answer, strict=False).decode


def usage_of(u: _Usage | None) -> Usage | None:
    if u is None:
        return None
    d = u.prompt_tokens_details
    return Usage(prompt_tokens=u.prompt_tokens or 0, completion_tokens=u.completion_tokens or 0,
                 cached_tokens=(d.cached_tokens or 0) if d is not None else 0)


def logprobs_of(lp: Any) -> list[TokenLogprob] | None:
    if not isinstance(lp, dict):
        return None
    if isinstance(lp.get("content"), list):  # chat / SGP form
        return [TokenLogprob(token=e.get("token", ""), logprob=_float(e.get("logprob")),
                             top=[TopLogprob(t.get("token", ""), float(t.get("logprob") or 0.0))
                                  for t in e.get("top_logprobs") or []],
                             bytes=e.get("bytes"))
                for e in lp["content"]]
    tokens = lp.get("tokens")
    if not isinstance(tokens, list):
        return None
    lps = lp.get("token_logprobs") or [None] * len(tokens)
    tops = lp.get("top_logprobs") or [None] * len(tokens)
    return [TokenLogprob(token=t, logprob=_float(v),
                         top=[TopLogprob(k, float(x)) for k, x in (top or {}).items()])
            for t, v, top in zip(tokens, lps, tops, strict=False)]


def _float(v: Any) -> float | None:
    """A token's logprob; null (echo's first prompt token, which nothing predicts) stays null."""
    return None if v is None else float(v)


def chunks_of(ans: Answer, *, chat: bool, delta: bool) -> list[Chunk]:
    """The chunks in one answer (``delta``: a stream event)."""
    out: list[Chunk] = []
    for c in ans.choices or ():
        lp = logprobs_of(c.logprobs) if c.logprobs is not None else None
        tokens = len(lp) if lp is not None else None
        if chat:
            m = (c.delta if delta else c.message) or _EMPTY
            ch = Chunk(index=c.index, text=m.content or "", finish_reason=c.finish_reason,  # type: ignore[arg-type]  # the upstream's word
                       logprobs=lp, tokens=tokens, role=m.role, tool_calls=m.tool_calls)
            if m.reasoning_content is not None or m.reasoning is not None:  # (most events: neither)
                thought = m.reasoning_content if isinstance(m.reasoning_content, str) else m.reasoning
                if thought and isinstance(thought, str):
                    ch.reasoning = thought
            out.append(ch)
        else:
            out.append(Chunk(index=c.index, text=c.text or "", finish_reason=c.finish_reason,  # type: ignore[arg-type]  # the upstream's word
                             logprobs=lp, tokens=tokens))
    if ans.usage is not None and (usage := usage_of(ans.usage)) is not None:
        if out:
            out[-1].usage = usage
        else:
            out.append(Chunk(usage=usage))
    return out


_EMPTY = _Message()


class _Vector(msgspec.Struct):
    embedding: list[float] | str  # a string: base64 float32, as asked with encoding_format
    index: int = 0


class _Embeddings(msgspec.Struct):
    data: list[_Vector] | None = None
    usage: _Usage | None = None
    error: Any = None


_decode_embeddings = msgspec.json.Decoder(_Embeddings, strict=False).decode


def embeddings_of(raw: bytes, inputs: int) -> Chunk:
    """An OpenAI-shaped embeddings answer -> one chunk with every vector (in input order) and
    the usage (prompt tokens only). ``ValueError`` (its message: what is wrong) for anything else."""
    try:
        ans = _decode_embeddings(raw)
        vectors = [v.embedding if isinstance(v.embedding, list) else floats_b64(v.embedding)
                   for v in sorted(ans.data or (), key=lambda v: v.index)]
    except (msgspec.DecodeError, ValueError):  # base64's errors are ValueErrors
        raise ValueError("sent a malformed embeddings answer") from None
    if ans.error is not None or len(vectors) != inputs:
        got = "an error" if ans.error is not None else f"{len(vectors)} vectors for {inputs} inputs"
        raise ValueError(f"sent {got} in its embeddings answer")
    usage = usage_of(ans.usage) or Usage()
    return Chunk(embeddings=vectors, usage=Usage(prompt_tokens=usage.prompt_tokens), finish_reason="stop")
