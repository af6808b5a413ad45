"""Incremental detokenization and stop sequences.

Text is released as soon as it can no longer be part of a stop sequence: a suffix that is a
prefix of some stop string is held back until the next token decides it.
"""

from __future__ import annotations

from typing import Any


class Detokenizer:
    """Turns a growing token list into text deltas without re-decoding everything, and never
    splits a multi-byte character (an incomplete one decodes to U+FFFD and is held back)."""

    def __init__(self, tokenizer: Any, context: list[int]) -> None:
        self._decode = tokenizer.decode
        # A few prompt tokens give the first output token its proper leading space.
        self.ids: list[int] = list(context[-4:])
        self.prefix = 0
        self.read = len(self.ids)

    def add(self, token: int) -> str:
        self.ids.append(token)
        prefix_text = self._decode(self.ids[self.prefix:self.read], skip_special_tokens=True)
        new_text = self._decode(self.ids[self.prefix:], skip_special_tokens=True)
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            self.prefix, self.read = self.read, len(self.ids)
            return new_text[len(prefix_text):]
        return ""


class StopMatcher:
    def __init__(self, stops: list[str] | None, include: bool) -> None:
        self.stops = [s for s in (stops or []) if s]
        self.include = include
        self.held = ""

    def feed(self, delta: str) -> tuple[str, str | None]:
        """Returns (text to emit now, the stop string if one matched)."""
        if not self.stops:
            return delta, None
        buf = self.held + delta
        best: tuple[int, str] | None = None
        for s in self.stops:
            i = buf.find(s)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s)
        if best is not None:
            i, s = best
            self.held = ""
            return buf[: i + len(s)] if self.include else buf[:i], s
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), keep, -1):
                if buf.endswith(s[:k]):
                    keep = k
                    break
        self.held = buf[len(buf) - keep:] if keep else ""
        return buf[: len(buf) - keep], None

    def flush(self) -> str:
        out, self.held = self.held, ""
        return out
