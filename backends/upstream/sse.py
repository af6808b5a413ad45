"""Server-sent events from an upstream: ``data:`` payloads, one per event."""

from __future__ import annotations

from collections.abc import AsyncIterator


async def sse_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Yield each event's data (multi-line data joined by newlines); comments and other fields
    are skipped. Works on arbitrary chunk boundaries."""
    buf = b""
    data: list[bytes] = []
    async for chunk in chunks:
        buf += chunk
        while True:
            nl = buf.find(b"\n")
            if nl == -1:
                break
            line, buf = buf[:nl].rstrip(b"\r"), buf[nl + 1:]
            if not line:
                if data:
                    yield b"\n".join(data)
                    data = []
            elif line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" ") if line[5:6] == b" " else line[5:])
    if data:
        yield b"\n".join(data)
