"""Finding matches in text, whole or as it streams.

A stream is scanned with the ``regex`` module's partial matches: text is released as soon as no
match can still begin in it, so a stream waits only while a match may be forming (a word that may
be an email's start, the digits of a card) and never longer than the longest pattern's span.
Every decision on released text is final: the same hits are found whatever the chunking
(``tests/guards/test_stream_fuzz.py`` splits every sample at every position).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from switchyard.guards.detectors import Detector

T = TypeVar("T")
# Released text kept before the unreleased part, for look-behinds (``(?<![\w.])``) at its edge.
CONTEXT = 32


@dataclass(frozen=True, slots=True)
class Hit(Generic[T]):
    start: int
    end: int
    what: T  # whatever the caller paired the detector with (a guard's rule)
    detector: Detector


def _scan(det: Detector, text: str, pos: int, final: bool) -> tuple[list[tuple[int, int]], int]:
    """One detector's matches in ``text[pos:]`` that no more text can change, and the offset from
    which text must wait (``len(text)`` when ``final``)."""
    found: list[tuple[int, int]] = []
    p = det.pattern
    for m in p.finditer(text, pos, partial=not final):
        s, e = m.span()
        # A match that reaches the end, or one that more text could still make longer (or turn
        # into another alternative), waits: its start is where the stream must hold.
        if not final and (m.partial or e == len(text) or p.fullmatch(text, s, partial=True) is not None):
            return found, s
        if e > s and (det.validate is None or det.validate(text[s:e])):
            found.append((s, e))
    return found, len(text)


def scan(entries: Sequence[tuple[Detector, T]], text: str, pos: int = 0,
         final: bool = True) -> tuple[list[Hit[T]], int]:
    """Non-overlapping hits in ``text[pos:]`` (the earlier start wins, then the longer), and the
    offset up to which ``text`` may be released."""
    hits: list[Hit[T]] = []
    release = len(text)
    for det, what in entries:
        found, hold = _scan(det, text, pos, final)
        release = min(release, hold)
        hits += (Hit(s, e, what, det) for s, e in found)
    hits.sort(key=lambda h: (h.start, -h.end))
    kept: list[Hit[T]] = []
    for h in hits:
        if h.start >= release:
            break
        if kept and h.start < kept[-1].end:
            continue  # overlaps a hit that starts earlier
        if h.end > release:  # a hit across the hold point waits whole
            release = h.start
            break
        kept.append(h)
    return kept, release


def apply(text: str, hits: Sequence[Hit[T]], replace: Callable[[Hit[T], str], str], start: int = 0,
          end: int | None = None) -> str:
    """``text[start:end]`` with each hit replaced by ``replace(hit, matched)``."""
    out: list[str] = []
    at = start
    for h in hits:
        out.append(text[at:h.start])
        out.append(replace(h, text[h.start:h.end]))
        at = h.end
    out.append(text[at:end])
    return "".join(out)


class Holder(Generic[T]):
    """One stream of text (one choice's answer): ``feed`` returns what may go to the caller now."""

    __slots__ = ("buf", "entries", "pos", "replace")

    def __init__(self, entries: Sequence[tuple[Detector, T]], replace: Callable[[Hit[T], str], str]) -> None:
        self.entries = entries
        self.replace = replace
        self.buf = ""  # released context (up to CONTEXT characters) + what is held
        self.pos = 0  # where the held part begins in buf

    def feed(self, text: str, final: bool = False) -> str:
        if not text and not final:
            return ""
        buf = self.buf + text
        hits, release = scan(self.entries, buf, self.pos, final)
        out = apply(buf, hits, self.replace, self.pos, release)
        keep_from = max(0, release - CONTEXT)
        self.buf, self.pos = buf[keep_from:], release - keep_from
        return out

    @property
    def held(self) -> int:
        return len(self.buf) - self.pos
