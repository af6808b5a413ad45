"""Canonical chunks on their way back: counted for usage, gathered for whole answers."""

from __future__ import annotations

from switchyard.core.canonical import Choice, Chunk, Completion, Usage


class Tally:
    """What a request has produced so far, for settling its usage however it ends.

    The backend's reported usage wins; until (or unless) it comes, completion tokens are
    counted from the chunks: ``Chunk.tokens`` when the backend says, else one per text chunk
    (one streamed event carries one token on every server we speak to).
    """

    __slots__ = ("counted", "prompt_tokens", "reported")

    def __init__(self, prompt_tokens: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.counted = 0
        self.reported: Usage | None = None

    def add(self, ch: Chunk) -> None:
        if ch.usage is not None:
            self.reported = ch.usage
        if ch.tokens is not None:
            self.counted += ch.tokens
        elif ch.text or ch.tool_calls or ch.thinking or ch.reasoning:
            self.counted += 1

    def usage(self) -> Usage:
        if self.reported is not None:
            return self.reported
        return Usage(prompt_tokens=self.prompt_tokens, completion_tokens=self.counted)

    @property
    def produced(self) -> bool:
        return self.counted > 0 or (self.reported is not None and self.reported.completion_tokens > 0)


def gather(chunks: list[Chunk], usage: Usage) -> Completion:
    """Chunks -> one Completion with a choice per index, in index order."""
    by_index: dict[int, Choice] = {}
    texts: dict[int, list[str]] = {}
    for ch in chunks:
        if (ch.usage is not None and not ch.text and ch.finish_reason is None and ch.logprobs is None
                and ch.embeddings is None and not ch.reasoning):
            continue  # a usage-only chunk
        c = by_index.get(ch.index)
        if c is None:
            c = by_index[ch.index] = Choice(index=ch.index)
            texts[ch.index] = []
        texts[ch.index].append(ch.text)
        if ch.finish_reason is not None:
            c.finish_reason = ch.finish_reason
        if ch.stop_word is not None:
            c.stop_word = ch.stop_word
        if ch.logprobs is not None:
            c.logprobs = (c.logprobs or []) + ch.logprobs
        if ch.prompt_logprobs is not None:
            c.prompt_logprobs = ch.prompt_logprobs
        if ch.tool_calls:
            c.tool_calls = (c.tool_calls or []) + ch.tool_calls
        if ch.thinking:
            c.thinking = (c.thinking or []) + ch.thinking
        if ch.reasoning:
            c.reasoning += ch.reasoning
        if ch.embeddings is not None:
            c.embeddings = (c.embeddings or []) + ch.embeddings
    for i, c in by_index.items():
        c.text = "".join(texts[i])
    return Completion(choices=[by_index[i] for i in sorted(by_index)], usage=usage)
