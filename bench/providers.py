"""The provider layer's own CPU per request, in one process, beside the OpenAI pass-through's in
the same run (no network: what the gateway adds per provider, not the upstream's time).

    .venv/bin/python bench/providers.py [--n 2000]

1. SigV4: signing one Converse request (the issue's target: <= 30 us), beside botocore's own
   SigV4Auth.
2. Event-stream frames: decoding 100 ConverseStream frames, beside botocore's EventStreamBuffer.
3. Per streamed chat request of 64 text deltas plus the finish and usage events, as 8 network
   reads: render the body, encode it, sign it where the row signs, split the answer into events
   (SSE or AWS event-stream) and decode them into canonical chunks, for the openai, bedrock and
   gemini rows. Printed with the ratio to openai.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.deployments import DeploymentConfig
from switchyard.providers.aws.eventstream import FrameReader, encode_frame
from switchyard.providers.aws.sigv4 import Credentials, SigV4
from switchyard.providers.rows import wire_for
from switchyard.providers.sse import sse_batches

HOST = "bedrock-runtime.us-east-1.amazonaws.com"
PATH = "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream"
BODY = (
    b'{"messages":[{"role":"user","content":[{"text":"' + b"hello " * 300 + b'"}]}],'
    b'"inferenceConfig":{"maxTokens":256}}'
)
TOKENS = 64
READS = 8


def per_call(fn: Callable[[], object], n: int, rounds: int = 5) -> float:
    for _ in range(min(n, 200)):
        fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1e6


def sign_and_frames(n: int) -> None:
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token")
    signer = SigV4("bedrock", "us-east-1", lambda: creds)
    headers = {"content-type": "application/json"}
    ours = per_call(lambda: signer.sign("POST", HOST, PATH, "", headers, BODY), n)

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    boto = SigV4Auth(BotoCredentials(creds.access_key, creds.secret_key, creds.token), "bedrock", "us-east-1")

    def boto_sign() -> None:
        boto.add_auth(AWSRequest("POST", f"https://{HOST}{PATH}", data=BODY, headers=dict(headers)))

    theirs = per_call(boto_sign, max(n // 10, 50))
    print(
        f"sign a Converse request ({len(BODY)} B body): switchyard {ours:.1f} us, "
        f"botocore SigV4Auth {theirs:.1f} us ({theirs / ours:.1f}x)"
    )

    frames = b"".join(
        encode_frame(
            {
                ":message-type": "event",
                ":event-type": "contentBlockDelta",
                ":content-type": "application/json",
            },
            b'{"contentBlockIndex":0,"delta":{"text":"token "},"p":"abcdefgh"}',
        )
        for _ in range(100)
    )

    def ours_decode() -> None:
        FrameReader().feed(frames)

    from botocore.eventstream import EventStreamBuffer

    def boto_decode() -> None:
        b = EventStreamBuffer()
        b.add_data(frames)
        for _ in b:
            pass

    a = per_call(ours_decode, max(n // 10, 20))
    b = per_call(boto_decode, max(n // 10, 20))
    print(
        f"decode 100 ConverseStream frames: switchyard {a:.1f} us, botocore EventStreamBuffer {b:.1f} us "
        f"({b / a:.1f}x)"
    )


def _sse(objs: list[Any]) -> bytes:
    return b"".join(
        b"data: " + (o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n\n" for o in objs
    )


def answers() -> dict[str, bytes]:
    """A 64-token streamed chat answer as each upstream sends it."""
    words = [f" w{i}" for i in range(TOKENS)]
    openai = _sse(
        [
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}],
            }
            for w in words
        ]
        + [
            {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {
                "id": "c",
                "choices": [],
                "usage": {"prompt_tokens": 9, "completion_tokens": TOKENS, "total_tokens": 9 + TOKENS},
            },
            b"[DONE]",
        ]
    )
    gemini = _sse(
        [
            {
                "candidates": [{"content": {"role": "model", "parts": [{"text": w}]}, "index": 0}],
                "modelVersion": "m",
            }
            for w in words[:-1]
        ]
        + [
            {
                "candidates": [
                    {
                        "content": {"role": "model", "parts": [{"text": words[-1]}]},
                        "finishReason": "STOP",
                        "index": 0,
                    }
                ],
                "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": TOKENS},
            }
        ]
    )

    def ev(name: str, payload: dict[str, Any]) -> bytes:
        return encode_frame(
            {":message-type": "event", ":event-type": name, ":content-type": "application/json"},
            json.dumps({**payload, "p": "abcdefghijkl"}).encode(),
        )

    bedrock = (
        ev("messageStart", {"role": "assistant"})
        + b"".join(ev("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": w}}) for w in words)
        + ev("contentBlockStop", {"contentBlockIndex": 0})
        + ev("messageStop", {"stopReason": "end_turn"})
        + ev(
            "metadata",
            {
                "usage": {"inputTokens": 9, "outputTokens": TOKENS, "totalTokens": 9 + TOKENS},
                "metrics": {"latencyMs": 5},
            },
        )
    )
    return {"openai": openai, "bedrock": bedrock, "gemini": gemini}


def request_fn(
    name: str, dep: DeploymentConfig, req: CanonicalRequest, raw: bytes, loop: asyncio.AbstractEventLoop
) -> Callable[[], None]:
    """One provider's streamed request (render, encode, sign, frame, decode), as a call."""
    wire = wire_for(dep)
    auth = wire.auth(dep)
    model = "anthropic.claude-3-5-sonnet-20240620-v1:0" if name == "bedrock" else "m"
    target = wire.target("chat", True, model)
    step = len(raw) // READS + 1
    reads = [raw[i : i + step] for i in range(0, len(raw), step)]
    framing = wire.framing or sse_batches
    encode = msgspec.json.encode

    async def arrivals() -> AsyncIterator[bytes]:
        for r in reads:
            yield r

    async def one() -> None:
        body, _ = wire.codec.render(req, model, dep)
        data = encode(body)
        if auth.signs:
            auth.sign("POST", target, HOST, data)
        dec = wire.codec.stream(req)
        async for batch in framing(arrivals()):
            for event, payload in batch:
                dec.feed(event, payload)
        assert dec.ending() is None

    return lambda: loop.run_until_complete(one())


def per_request(n: int) -> None:
    raw = {
        "openai": {"name": "o", "provider": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "k"},
        "bedrock": {
            "name": "b",
            "provider": "bedrock",
            "base_url": f"https://{HOST}",
            "region": "us-east-1",
            "aws_access_key_id": "AK",
            "aws_secret_access_key": "SK",
        },
        "gemini": {"name": "g", "provider": "gemini", "api_key": "k"},
    }
    deps = {name: DeploymentConfig.model_validate(d) for name, d in raw.items()}
    req = CanonicalRequest(
        kind="chat",
        model="v/m",
        dialect="openai",
        stream=True,
        max_tokens=100,
        temperature=0.5,
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello " * 50}],
    )
    bodies = answers()
    loop = asyncio.new_event_loop()
    calls = {name: request_fn(name, dep, req, bodies[name], loop) for name, dep in deps.items()}
    # Interleaved rounds, best of each: a busy machine slows every provider alike within a round.
    results = dict.fromkeys(calls, float("inf"))
    for _ in range(7):
        for name, fn in calls.items():
            results[name] = min(results[name], per_call(fn, n, rounds=1))
    loop.close()
    base = results["openai"]
    for name, us in results.items():
        print(
            f"streamed chat request, {TOKENS} tokens, provider layer CPU: {name:8s} {us:7.1f} us "
            f"({us / base:.2f}x openai)"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    n = ap.parse_args().n
    sign_and_frames(n * 10)
    per_request(n)


if __name__ == "__main__":
    main()
