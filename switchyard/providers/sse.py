"""Server-sent events from an upstream: (``event:`` name or None, ``data:`` payload), one per event."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

_EVENT_END = re.compile(rb"\r?\n\r?\n")
# Named events in their usual form (Anthropic's): an event line and one data line each. An
# arrival of them is read by one regular expression's split, in C, not by a call per event.
_NAMED = re.compile(rb"event:[ \t]*(\S*)[ \t]*\ndata: ?([^\n]*)\n\n")


Event = tuple[bytes | None, bytes]


async def sse_batches(chunks: AsyncIterator[bytes]) -> AsyncIterator[list[Event]]:
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
        if buf[:6] == b"event:" and b"\r" not in buf:
            end = buf.rfind(b"\n\n") + 2
            parts = _NAMED.split(buf[:end])  # [between, name, data, between, name, data, ..., after]
            if not any(parts[::3]):  # nothing between or after: every event had the usual form
                buf = buf[end:]
                yield list(zip(parts[1::3], parts[2::3], strict=True))
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
