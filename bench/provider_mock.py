"""A fast loopback upstream that streams the same N-token chat answer in three providers' wire
formats, for ``bench/overhead.py --providers``:

    POST .../chat/completions        OpenAI SSE: N content chunks, a finish chunk, a usage chunk, [DONE]
    POST .../v1/messages             Anthropic named SSE events: message_start, ping,
                                     content_block_start, N content_block_delta, content_block_stop,
                                     message_delta (with usage), message_stop
    POST .../model/{id}/converse-stream   Bedrock ConverseStream as AWS event-stream binary frames:
                                     messageStart, N contentBlockDelta, contentBlockStop, messageStop,
                                     metadata (with usage)
    GET  /health

Every answer is built once at start (frames encoded with the project's own encoder), one HTTP
chunk per event as the vendors send them, and written in one go: the mock reads the request head
and body, checks nothing (no signature, no key) and answers, so it costs the same little for
each provider and the gateway's CPU is what differs. Not a faithful fake: those are
``tests/fakes/anthropic.py`` and ``tests/fakes/bedrock.py``, far too slow to bench against.

    python bench/provider_mock.py --port 9100 [--tokens 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from switchyard.providers.aws.eventstream import CONTENT_TYPE as EVENTSTREAM
from switchyard.providers.aws.eventstream import encode_frame

PROMPT_TOKENS = 9


def words(n: int) -> list[str]:
    return [f" w{i}" if i else "w0" for i in range(n)]


def _sse(name: str | None, obj: Any) -> bytes:
    data = obj if isinstance(obj, bytes) else json.dumps(obj, separators=(",", ":")).encode()
    return (b"event: %s\n" % name.encode() if name else b"") + b"data: " + data + b"\n\n"


def openai_events(n: int) -> list[bytes]:
    head = {"id": "chatcmpl-b", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    out = [_sse(None, {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": w}
                                             if i == 0 else {"content": w}, "finish_reason": None}]})
           for i, w in enumerate(words(n))]
    out.append(_sse(None, {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    out.append(_sse(None, {**head, "choices": [], "usage": {
        "prompt_tokens": PROMPT_TOKENS, "completion_tokens": n, "total_tokens": PROMPT_TOKENS + n}}))
    return [*out, _sse(None, b"[DONE]")]


def anthropic_events(n: int) -> list[bytes]:
    usage = {"input_tokens": PROMPT_TOKENS, "output_tokens": 1, "cache_read_input_tokens": 0,
             "cache_creation_input_tokens": 0}
    msg = {"id": "msg_b", "type": "message", "role": "assistant", "model": "claude-bench", "content": [],
           "stop_reason": None, "stop_sequence": None, "usage": usage}
    evs: list[dict[str, Any]] = [
        {"type": "message_start", "message": msg}, {"type": "ping"},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}}
          for w in words(n)),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": n}},
        {"type": "message_stop"},
    ]
    return [_sse(e["type"], e) for e in evs]


def bedrock_events(n: int) -> list[bytes]:
    def ev(name: str, payload: dict[str, Any]) -> bytes:
        # Bedrock pads every event's JSON with a "p" field of varying length (against side channels).
        return encode_frame({":event-type": name, ":content-type": "application/json",
                             ":message-type": "event"},
                            json.dumps({**payload, "p": "abcdefghijklmnopq"}, separators=(",", ":")).encode())

    return [ev("messageStart", {"role": "assistant"}),
            *(ev("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": w}}) for w in words(n)),
            ev("contentBlockStop", {"contentBlockIndex": 0}),
            ev("messageStop", {"stopReason": "end_turn"}),
            ev("metadata", {"usage": {"inputTokens": PROMPT_TOKENS, "outputTokens": n,
                                      "totalTokens": PROMPT_TOKENS + n}, "metrics": {"latencyMs": 1}})]


def _response(ctype: str, events: list[bytes]) -> bytes:
    head = (f"HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ntransfer-encoding: chunked\r\n"
            "connection: keep-alive\r\n\r\n").encode()
    return head + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def answers(n: int) -> dict[bytes, bytes]:
    """The whole HTTP response per request path suffix."""
    return {b"/chat/completions": _response("text/event-stream", openai_events(n)),
            b"/v1/messages": _response("text/event-stream", anthropic_events(n)),
            b"/converse-stream": _response(EVENTSTREAM, bedrock_events(n))}


HEALTH = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: keep-alive\r\n\r\nok"
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class Proto(asyncio.Protocol):
    """Keep-alive HTTP/1.1 with content-length bodies (what the gateway sends), nothing else."""

    def __init__(self, table: dict[bytes, bytes]) -> None:
        self.table, self.buf, self.transport = table, b"", None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        out = []
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = self.buf[:end].lower()
            length = next((int(h[15:]) for h in head.split(b"\r\n") if h.startswith(b"content-length:")), 0)
            if len(self.buf) < end + 4 + length:
                break
            path = head.split(b" ", 2)[1].split(b"?")[0]
            self.buf = self.buf[end + 4 + length:]
            if path == b"/health":
                out.append(HEALTH)
                continue
            body = next((v for k, v in self.table.items() if path.endswith(k)), None)
            if body is None:
                self.transport.write(b"".join(out) + NOT_FOUND)  # type: ignore[attr-defined]
                self.transport.close()  # type: ignore[attr-defined]
                return
            out.append(body)
        if out:
            self.transport.write(b"".join(out))  # type: ignore[attr-defined]


async def serve(port: int, tokens: int) -> None:
    table = answers(tokens)
    server = await asyncio.get_running_loop().create_server(lambda: Proto(table), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tokens", type=int, default=20)
    a = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(a.port, a.tokens))
