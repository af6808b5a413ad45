"""The event-stream reader against botocore's own decoder (EventStreamBuffer): the same headers and
payloads for the same bytes, whatever the split, and clear errors where botocore finds a fault."""

from __future__ import annotations

import asyncio
import json
import struct
import uuid
from collections.abc import AsyncIterator
from zlib import crc32

import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer

from switchyard.providers.aws.eventstream import FrameError, FrameReader, encode_frame, frame_batches


def _converse_frames() -> list[bytes]:
    ev = {":message-type": "event", ":content-type": "application/json"}
    return [
        encode_frame({**ev, ":event-type": "messageStart"}, b'{"p":"ab","role":"assistant"}'),
        encode_frame(
            {**ev, ":event-type": "contentBlockDelta"},
            json.dumps({"contentBlockIndex": 0, "delta": {"text": "h\u00e9llo"}}).encode(),
        ),
        encode_frame({**ev, ":event-type": "messageStop"}, b'{"stopReason":"end_turn"}'),
        encode_frame(
            {
                ":message-type": "exception",
                ":exception-type": "throttlingException",
                ":content-type": "application/json",
            },
            b'{"message":"Too many requests"}',
        ),
        encode_frame({**ev, ":event-type": "metadata"}, b""),
    ]


def _typed_frame() -> bytes:
    """A frame with every header type, built by hand (botocore decodes them all)."""

    def h(name: str, kind: int, value: bytes) -> bytes:
        return bytes([len(name)]) + name.encode() + bytes([kind]) + value

    hb = (
        h("t", 0, b"")
        + h("f", 1, b"")
        + h("b", 2, b"\xff")
        + h("s", 3, struct.pack("!h", -2))
        + h("i", 4, struct.pack("!i", 7))
        + h("l", 5, struct.pack("!q", -9))
        + h("ba", 6, b"\x00\x02\x01\x02")
        + h("str", 7, b"\x00\x02ok")
        + h("ts", 8, struct.pack("!q", 1700000000000))
        + h("u", 9, uuid.UUID(int=5).bytes)
    )
    prelude = struct.pack("!II", 16 + len(hb) + 3, len(hb))
    body = prelude + struct.pack("!I", crc32(prelude)) + hb + b"xyz"
    return body + struct.pack("!I", crc32(body))


def _botocore(data: bytes) -> list[tuple[dict[str, object], bytes]]:
    buf = EventStreamBuffer()
    buf.add_data(data)
    return [(m.headers, m.payload) for m in buf]


def test_same_frames_as_botocore() -> None:
    data = b"".join(_converse_frames()) + _typed_frame()
    ours = FrameReader().feed(data)
    assert [(f.headers, f.payload) for f in ours] == _botocore(data)
    assert [f.name for f in ours[:5]] == [
        "messageStart",
        "contentBlockDelta",
        "messageStop",
        "throttlingException",
        "metadata",
    ]
    assert ours[3].message_type == "exception"
    assert ours[5].headers["t"] is True and ours[5].headers["f"] is False and ours[5].headers["s"] == -2


def test_any_split_gives_the_same_frames() -> None:
    data = b"".join(_converse_frames())
    whole = [(f.headers, f.payload) for f in FrameReader().feed(data)]
    for cut in range(1, len(data)):
        r = FrameReader()
        got = r.feed(data[:cut]) + r.feed(data[cut:])
        assert [(f.headers, f.payload) for f in got] == whole
        assert r.pending == 0
    r = FrameReader()  # one byte at a time
    got = [f for i in range(len(data)) for f in r.feed(data[i : i + 1])]
    assert [(f.headers, f.payload) for f in got] == whole


@pytest.mark.parametrize(
    "where,what", [(5, "prelude checksum"), (-2, "message checksum"), (20, "message checksum")]
)
def test_bad_crc_is_a_clear_error_as_in_botocore(where: int, what: str) -> None:
    frame = bytearray(_converse_frames()[1])
    frame[where] ^= 0x40
    with pytest.raises(ChecksumMismatch):
        _botocore(bytes(frame))
    with pytest.raises(FrameError, match=what):
        FrameReader().feed(bytes(frame))


def test_json_error_body_is_not_read_as_frames() -> None:
    # What Bedrock answers when a streaming call fails before streaming (read the content type first).
    with pytest.raises(FrameError, match="not an event stream"):
        FrameReader().feed(b'{"message":"The security token included in the request is invalid."}')


def test_cut_off_stream_is_an_error() -> None:
    data = b"".join(_converse_frames())

    async def chunks() -> AsyncIterator[bytes]:
        yield data[:50]
        yield data[50:-3]

    async def run() -> list[str]:
        names: list[str] = []
        async for batch in frame_batches(chunks()):
            names += [f.name for f in batch]
        return names

    with pytest.raises(FrameError, match="cut off inside a frame"):
        asyncio.run(run())


def test_frame_batches_groups_per_arrival() -> None:
    frames = _converse_frames()

    async def chunks() -> AsyncIterator[bytes]:
        yield frames[0] + frames[1][:7]
        yield frames[1][7:] + frames[2] + frames[3]

    async def run() -> list[list[str]]:
        return [[f.name for f in b] async for b in frame_batches(chunks())]

    assert asyncio.run(run()) == [
        ["messageStart"],
        ["contentBlockDelta", "messageStop", "throttlingException"],
    ]


def test_named_frames_for_the_codec() -> None:
    from switchyard.providers.aws.eventstream import named_frames

    err = encode_frame(
        {":message-type": "error", ":error-code": "InternalFailure", ":error-message": 'a "b"'}, b""
    )

    async def chunks() -> AsyncIterator[bytes]:
        yield b"".join(_converse_frames()[1:4]) + err

    async def run() -> list[tuple[bytes | None, bytes]]:
        return [pair async for batch in named_frames(chunks()) for pair in batch]

    got = asyncio.run(run())
    assert [n for n, _ in got] == [
        b"contentBlockDelta",
        b"messageStop",
        b"throttlingException",
        b"InternalFailure",
    ]
    assert json.loads(got[2][1]) == {"message": "Too many requests"}
    assert json.loads(got[3][1]) == {"message": 'a "b"'}
