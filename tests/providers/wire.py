"""Raw HTTP answers for the loopback servers of ``tests.providers.test_h1.raw_server``: an upstream
that says exactly the bytes a test needs (errors inside 200s, wrong content types, odd streams)."""

from __future__ import annotations

import json
from typing import Any

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            407: "Proxy Authentication Required", 404: "Not Found", 408: "Request Timeout",
            413: "Content Too Large", 422: "Unprocessable Content", 429: "Too Many Requests",
            500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway",
            503: "Service Unavailable", 504: "Gateway Timeout"}


def answer(status: int, body: bytes, content_type: str = "application/json", extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n%s"
            % (status, _REASONS.get(status, "X").encode(), content_type.encode(), len(body), extra, body))


def json_answer(obj: Any, status: int = 200) -> bytes:
    return answer(status, json.dumps(obj).encode())


def completion(text: str = "ok", finish: str | None = "stop") -> dict[str, Any]:
    return {"id": "up", "object": "text_completion", "model": "m",
            "choices": [{"index": 0, "text": text, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def event(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"id": "up", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def sse(*events: Any, content_type: str = "text/event-stream") -> bytes:
    """A whole stream; each event a dict (as JSON) or raw str data."""
    data = b"".join(b"data: " + (e.encode() if isinstance(e, str) else json.dumps(e).encode()) + b"\n\n"
                    for e in events)
    return answer(200, data, content_type)


def error(message: str, status: int) -> bytes:
    return json_answer({"error": {"message": message, "type": "upstream"}}, status)
