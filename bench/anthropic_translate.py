"""CPU cost of translating one Claude-Code-sized Anthropic Messages request (87 KB: a long system
prompt, 12 tools; ``tests/fakes/claude_code.py``) into the OpenAI chat body an upstream receives.

    .venv/bin/python bench/anthropic_translate.py [--n 300]

Each step is timed with ``time.process_time`` (CPU, not wall) over ``--n`` runs, median per
request: decode the body, read it (``read_request``), write the upstream body
(``render_request``) and encode it. The baseline, in the same run, is the same conversation
already in OpenAI's chat shape going through the same steps of ``/v1/chat/completions`` (decode,
``parse_request``, ``render_request``, encode): the ratio is what the Anthropic dialect adds.
Budget: <= 2 ms per request.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from switchyard.dialects.anthropic.request import read_request
from switchyard.dialects.chat import CHAT
from switchyard.dialects.parse import parse_request
from switchyard.dialects.registry import DIALECTS
from switchyard.providers.openai.request import render_request
from tests.fakes import claude_code

OPENAI = DIALECTS["openai"]
HEADERS = claude_code.headers("sk-bench")


def anthropic_once(raw: bytes) -> bytes:
    req = read_request(msgspec.json.decode(raw), raw, HEADERS)
    return msgspec.json.encode(render_request(OPENAI, req, "up")[0])


def chat_once(raw: bytes) -> bytes:
    req = parse_request(CHAT, msgspec.json.decode(raw), kind="chat")
    return msgspec.json.encode(render_request(OPENAI, req, "up")[0])


def cpu_ms(fn: Callable[[bytes], bytes], raw: bytes, n: int) -> float:
    for _ in range(20):
        fn(raw)
    times = []
    for _ in range(n):
        t = time.process_time()
        fn(raw)
        times.append(time.process_time() - t)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    args = ap.parse_args()
    body = claude_code.body("claude-sonnet-5")
    raw = msgspec.json.encode(body)
    # The same conversation, as an OpenAI chat caller would send it (what /v1/messages produces).
    chat = msgspec.json.decode(anthropic_once(raw))
    chat_raw = msgspec.json.encode({**chat, "model": "claude-sonnet-5"})
    a = cpu_ms(anthropic_once, raw, args.n)
    b = cpu_ms(chat_once, chat_raw, args.n)
    print(f"Claude Code request: {len(raw) / 1000:.1f} KB, {len(body['tools'])} tools")
    print(f"/v1/messages  -> upstream body: {a:.3f} ms CPU (median of {args.n})")
    print(f"/v1/chat/completions (same conversation, baseline): {b:.3f} ms CPU  ratio {a / b:.2f}x")
    print(f"budget 2 ms: {'met' if a <= 2.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
