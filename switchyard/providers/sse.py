"""Server-sent events from an upstream: (``event:`` name or None, ``data:`` payload), one per event."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator
from itertools import repeat

_EVENT_END = re.compile(rb"\r?\n\r?\n")
# Events in their usual forms, an arrival of them read by one regular expression's split, in C,
# not by a call per event: named, an event line and one data line each (Anthropic's), or
# unnamed, one data line each (OpenAI's and most others').
_NAMED = re.compile(rb"event:[ \t]*(\S*)[ \t]*\ndata: ?([^\n]*)\n\n")
_DATA = re.compile(rb"data: ?([^\n]*)\n\n")


Event = tuple[bytes | None, bytes]


async def sse_batches(chunks: AsyncIterator[bytes]) -> AsyncGenerator[list[Event], None]:
    """Yield, per arrival from the network, the name and data of each event completed by it
    (multi-line data joined by newlines; comments, ids and retry fields skipped; an event
    without data skipped). Works on arbitrary chunk
    boundaries and splits each arrival once: an upstream often sends many events in one packet,
    and keeping them together lets the gateway relay them together."""
    buf = b""
    async for chunk in chunks:
        buf = buf + chunk if buf else chunk
        if b"\n\n" not in buf and b"\r\n\r\n" not in buf:
            continue
        usual = _usual(buf) if b"\r" not in buf else None
        if usual is not None:
            buf = buf[usual[1]:]
            yield usual[0]
            continue
        # bytes.split is several times faster than the regex; CRLF framing is rare
        *events, buf = _EVENT_END.split(buf) if b"\r" in buf else buf.split(b"\n\n")
        # the common case inline: one data line, no event name
        batch = [(None, ev[6:] if ev[5:6] == b" " else ev[5:]) if ev[:5] == b"data:" and b"\n" not in ev
                 else _event(ev) for ev in events]
        if None in batch:
            batch = [e for e in batch if e is not None]
        if batch:
            yield batch  # type: ignore[misc]  # the Nones are gone
    if buf.strip():
        ev = _event(buf)
        if ev is not None:
            yield [ev]


def _usual(buf: bytes) -> tuple[list[Event], int] | None:
    """The events an arrival completes and where they end, when every one has the usual form
    (``_NAMED`` or ``_DATA``, not both); else None."""
    if buf[:6] == b"event:":
        form, step = _NAMED, 3
    elif buf[:5] == b"data:":
        form, step = _DATA, 2
    else:
        return None
    end = buf.rfind(b"\n\n") + 2
    parts = form.split(buf[:end])  # [between, (name,) data, between, (name,) data, ..., after]
    if any(parts[::step]):  # something between or after: an event of another form
        return None
    names = parts[1::3] if step == 3 else repeat(None)  # (repeat: endless, so not strict)
    return list(zip(names, parts[step - 1::step], strict=False)), end


def _event(event: bytes) -> Event | None:
    if event.startswith(b"data:") and b"\n" not in event:  # the common case: one data line
        return None, (event[6:] if event[5:6] == b" " else event[5:])
    name = None
    parts = []
    for line in event.splitlines():
        if line.startswith(b"data:"):
            parts.append(line[6:] if line[5:6] == b" " else line[5:])
        elif line.startswith(b"event:"):
            name = line[6:].strip()
    return (name, b"\n".join(parts)) if parts else None
