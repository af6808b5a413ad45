"""Stop sequences applied to streamed text, for servers that cannot apply them the way the caller
asked. Text that might be the start of a stop sequence is held back until it cannot be."""

from __future__ import annotations


class StopScanner:
    def __init__(self, stops: list[str], include: bool = False) -> None:
        self.stops = [s for s in stops if s]
        self.include = include
        # Last characters of the stops' proper prefixes: text ending in none of them holds
        # nothing back, found without trying every prefix.
        self._ends = {c for s in self.stops for c in s[:-1]}
        self.pending = ""
        self.word: str | None = None  # the stop sequence that matched, once one has

    def feed(self, text: str) -> str:
        """The part of ``text`` (plus what was held back) that is safe to emit now. After a
        match, ``word`` is set and everything later is dropped."""
        if self.word is not None:
            return ""
        if not self.stops:
            return text
        buf = self.pending + text
        hit, at = None, len(buf)
        for s in self.stops:
            i = buf.find(s)
            if i != -1 and i < at:
                hit, at = s, i
        if hit is not None:
            self.word, self.pending = hit, ""
            return buf[: at + len(hit)] if self.include else buf[:at]
        keep = self._held(buf)
        self.pending = buf[len(buf) - keep:] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """At the end of the text: whatever was held back was not a stop after all."""
        out, self.pending = self.pending, ""
        return out

    def _held(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that is a proper prefix of some stop."""
        if not buf or buf[-1] not in self._ends:
            return 0
        best = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), best, -1):
                if buf.endswith(s[:k]):
                    best = k
                    break
        return best
