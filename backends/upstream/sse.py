"""Server-sent events from an upstream: ``data:`` payloads, one per event."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

_EVENT_END = re.compile(rb"\r?\n\r?\n")


async def sse_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Yield each event's data (multi-line data joined by newlines); comments and other fields
    are skipped. Works on arbitrary chunk boundaries; splits each arrival once (an upstream often
    sends many events in one packet)."""
    buf = b""
    async for chunk in chunks:
        buf = buf + chunk if buf else chunk
        if b"\n\n" not in buf and b"\r\n\r\n" not in buf:
            continue
        *events, buf = _EVENT_END.split(buf)
        for ev in events:
            data = _data(ev)
            if data is not None:
                yield data
    if buf.strip():
        data = _data(buf)
        if data is not None:
            yield data


def _data(event: bytes) -> bytes | None:
    if event.startswith(b"data:") and b"\n" not in event:  # the common case: one data line
        return event[6:] if event[5:6] == b" " else event[5:]
    parts = [line[6:] if line[5:6] == b" " else line[5:]
             for line in event.splitlines() if line.startswith(b"data:")]
    return b"\n".join(parts) if parts else None
