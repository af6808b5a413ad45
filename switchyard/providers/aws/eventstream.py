"""AWS event-stream framing (``application/vnd.amazon.eventstream``), as Bedrock's streaming
operations answer: binary frames, each

    [total_length u32][headers_length u32][prelude CRC32][headers][payload][message CRC32]

(big-endian; the message CRC covers everything before it, the prelude's CRC included). A header is
``[name_len u8][name][type u8][value]``; Bedrock sends strings (type 7): ``:message-type``
(``event`` | ``exception`` | ``error``), ``:event-type``, ``:exception-type``, ``:content-type``.

The reader is incremental (frames split across network reads, many in one read) and checks both
CRCs: a corrupt or truncated stream is a clear ``FrameError``, never a silent misread. It is
tested against botocore's ``EventStreamBuffer``. Note: a streaming call that fails *before*
streaming answers a JSON error body instead of frames; read the content type first (feeding that
JSON here gives a misleading length or CRC error).
"""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from zlib import crc32

CONTENT_TYPE = "application/vnd.amazon.eventstream"
MAX_HEADERS = 128 * 1024  # botocore's limits
MAX_PAYLOAD = 24 * 1024 * 1024
_PRELUDE = struct.Struct("!III")
_U32 = struct.Struct("!I")
_U16 = struct.Struct("!H")
# header value type -> fixed width (bool true/false carry none); 6 bytes and 7 string: u16 length
_FIXED = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}
_INT = {2: "!b", 3: "!h", 4: "!i", 5: "!q", 8: "!q"}


class FrameError(Exception):
    """The bytes are not a well-formed event-stream (bad length, CRC, or header)."""


@dataclass(slots=True)
class Frame:
    headers: Mapping[str, object]  # shared between frames with the same header bytes: read only
    payload: bytes
    message_type: str = ""  # event | exception | error
    name: str = ""  # the event's type, or an exception's (``throttlingException``), or an error's code


class FrameReader:
    """Feed bytes as they arrive; get the frames they complete."""

    __slots__ = ("_buf", "_seen")

    def __init__(self) -> None:
        self._buf = b""
        # A stream repeats a few header blocks (one per event type): each is parsed once.
        self._seen: dict[bytes, _Known] = {}

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held (a stream that ends with some was cut off)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        return [Frame(k.headers, payload, k.kind, k.name) for k, payload in self._scan(data)]

    def feed_named(self, data: bytes) -> list[tuple[bytes | None, bytes]]:
        """The completed frames as (name, payload) pairs (see ``named_frames``)."""
        return [
            (k.pair_name, payload if k.kind != "error" else k.error_payload)
            for k, payload in self._scan(data)
        ]

    def _scan(self, data: bytes) -> list[tuple[_Known, bytes]]:
        buf = self._buf + data if self._buf else data
        view = memoryview(buf)  # CRCs over slices of it copy nothing
        out: list[tuple[_Known, bytes]] = []
        pos, end = 0, len(buf)
        while end - pos >= 12:
            total, hlen, pcrc = _PRELUDE.unpack_from(buf, pos)
            if crc32(view[pos : pos + 8]) != pcrc:
                raise FrameError(
                    "event-stream prelude checksum mismatch (corrupt frame, or not an event stream)"
                )
            if hlen > MAX_HEADERS or total < 16 + hlen or total - 16 - hlen > MAX_PAYLOAD:
                raise FrameError(f"event-stream frame lengths out of range (total {total}, headers {hlen})")
            if end - pos < total:
                break
            stop = pos + total - 4
            if crc32(view[pos:stop]) != _U32.unpack_from(buf, stop)[0]:
                raise FrameError("event-stream message checksum mismatch (corrupt frame)")
            raw = buf[pos + 12 : pos + 12 + hlen]
            known = self._seen.get(raw)
            if known is None:
                known = _Known(_headers(raw, 0, hlen))
                if len(self._seen) < 64:
                    self._seen[raw] = known
            out.append((known, buf[pos + 12 + hlen : stop]))
            pos += total
        self._buf = buf[pos:] if pos < end else b""
        return out


class _Known:
    """What a header block says, worked out once per distinct block."""

    __slots__ = ("error_payload", "headers", "kind", "name", "pair_name")

    def __init__(self, headers: dict[str, object]) -> None:
        self.headers = headers
        self.kind = str(headers.get(":message-type", ""))
        key = ":event-type" if self.kind == "event" else ":exception-type"
        self.name = str(headers.get(key) or headers.get(":error-code") or "")
        self.pair_name: bytes | None = self.name.encode() or (
            b"errorException" if self.kind == "error" else None
        )
        msg = str(headers.get(":error-message") or "")
        self.error_payload = b'{"message":' + json.dumps(msg).encode() + b"}"


def _headers(b: bytes, pos: int, end: int) -> dict[str, object]:
    out: dict[str, object] = {}
    try:
        while pos < end:
            n = b[pos]
            name = b[pos + 1 : pos + 1 + n].decode()
            pos += 1 + n
            kind = b[pos]
            pos += 1
            value: object
            if kind in (6, 7):
                size = _U16.unpack_from(b, pos)[0]
                raw = b[pos + 2 : pos + 2 + size]
                value = raw.decode() if kind == 7 else raw
                pos += 2 + size
            elif kind in _FIXED:
                width = _FIXED[kind]
                raw = b[pos : pos + width]
                value = (kind == 0) if width == 0 else raw if kind == 9 else struct.unpack(_INT[kind], raw)[0]
                pos += width
            else:
                raise FrameError(f"event-stream header {name!r} has unknown type {kind}")
            out[name] = value
    except (IndexError, struct.error, UnicodeDecodeError):
        raise FrameError("event-stream headers are malformed") from None
    if pos != end:
        raise FrameError("event-stream headers overrun their length")
    return out


async def frame_batches(chunks: AsyncIterator[bytes]) -> AsyncIterator[list[Frame]]:
    """Per arrival from the network, the frames it completed (as ``sse_batches`` does for SSE).
    A body that ends inside a frame is a ``FrameError``."""
    reader = FrameReader()
    async for chunk in chunks:
        frames = reader.feed(chunk)
        if frames:
            yield frames
    if reader.pending:
        raise FrameError(f"event stream cut off inside a frame ({reader.pending} bytes left over)")


def encode_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One frame with string headers (what Bedrock sends); for test doubles and benchmarks."""
    hb = b"".join(
        bytes([len(k)]) + k.encode() + b"\x07" + _U16.pack(len(v.encode())) + v.encode()
        for k, v in headers.items()
    )
    total = 16 + len(hb) + len(payload)
    prelude = struct.pack("!II", total, len(hb))
    body = prelude + _U32.pack(crc32(prelude)) + hb + payload
    return body + _U32.pack(crc32(body))


async def named_frames(
    chunks: AsyncIterator[bytes],
) -> AsyncGenerator[list[tuple[bytes | None, bytes]], None]:
    """Frames as (name, payload) pairs, the shape a codec's stream decoder is fed: an event is named
    by its ``:event-type``, an exception by its ``:exception-type`` (as the service model names
    both in one union: ``messageStop``, ``throttlingException``), an ``error`` frame by its
    ``:error-code`` with ``{"message": :error-message}`` as payload. A body that ends inside a
    frame is a ``FrameError``."""
    reader = FrameReader()
    async for chunk in chunks:
        pairs = reader.feed_named(chunk)
        if pairs:
            yield pairs
    if reader.pending:
        raise FrameError(f"event stream cut off inside a frame ({reader.pending} bytes left over)")
