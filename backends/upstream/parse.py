"""Read an upstream's OpenAI-shaped answers (completions and chat, whole or streamed) into
canonical chunks. llama.cpp, mistral.rs, vLLM, Fireworks and SGP all answer in this shape; SGP and
chat put logprobs in the chat form, the others in the legacy form."""

from __future__ import annotations

from typing import Any

from gateway.canonical import Chunk, TokenLogprob, TopLogprob, Usage


def usage_of(obj: Any) -> Usage | None:
    u = obj.get("usage") if isinstance(obj, dict) else None
    if not isinstance(u, dict):
        return None
    details = u.get("prompt_tokens_details") or {}
    return Usage(prompt_tokens=int(u.get("prompt_tokens") or 0),
                 completion_tokens=int(u.get("completion_tokens") or 0),
                 cached_tokens=int(details.get("cached_tokens") or 0))


def logprobs_of(lp: Any) -> list[TokenLogprob] | None:
    if not isinstance(lp, dict):
        return None
    if isinstance(lp.get("content"), list):  # chat / SGP form
        return [TokenLogprob(token=e.get("token", ""), logprob=float(e.get("logprob") or 0.0),
                             top=[TopLogprob(t.get("token", ""), float(t.get("logprob") or 0.0))
                                  for t in e.get("top_logprobs") or []],
                             bytes=e.get("bytes"))
                for e in lp["content"]]
    tokens = lp.get("tokens")
    if not isinstance(tokens, list):
        return None
    lps = lp.get("token_logprobs") or [0.0] * len(tokens)
    tops = lp.get("top_logprobs") or [None] * len(tokens)
    return [TokenLogprob(token=t, logprob=float(v if v is not None else 0.0),
                         top=[TopLogprob(k, float(x)) for k, x in (top or {}).items()])
            for t, v, top in zip(tokens, lps, tops, strict=False)]


def chunks_of(obj: Any, *, chat: bool, delta: bool) -> list[Chunk]:
    """The chunks in one response object (``delta``: a stream event)."""
    out: list[Chunk] = []
    for c in obj.get("choices") or ():
        idx = int(c.get("index") or 0)
        lp = logprobs_of(c.get("logprobs"))
        if chat:
            m = c.get("delta" if delta else "message") or {}
            out.append(Chunk(index=idx, text=m.get("content") or "", role=m.get("role"),
                             tool_calls=m.get("tool_calls"), finish_reason=c.get("finish_reason"),
                             logprobs=lp, tokens=len(lp) if lp is not None else None))
        else:
            out.append(Chunk(index=idx, text=c.get("text") or "", finish_reason=c.get("finish_reason"),
                             logprobs=lp, tokens=len(lp) if lp is not None else None))
    usage = usage_of(obj)
    if usage is not None:
        if out:
            out[-1].usage = usage
        else:
            out.append(Chunk(usage=usage))
    return out
