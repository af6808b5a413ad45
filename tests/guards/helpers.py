"""A gateway with guardrails in front of the calibrated fake upstream, and the text a caller
reads from each dialect's answers."""

from __future__ import annotations

import json
from typing import Any

from switchyard.core.config import Config, parse_config
from tests.gateway.conftest import KEY, MASTER

MODEL = "vendor/gpt"
ANTHROPIC = {"anthropic-version": "2023-06-01"}


def guarded(url: str, model: list[dict[str, Any]] | None = None, team: list[dict[str, Any]] | None = None,
            key: list[dict[str, Any]] | None = None, access_log: bool = False) -> Config:
    return parse_config({
        "logging": {"access": access_log}, "master_key": MASTER,
        "models": [{"name": MODEL, "guardrails": model or [],
                    "deployments": [{"name": "d1", "dialect": "openai", "base_url": url}]},
                   {"name": "vendor/embed", "mode": "embedding", "guardrails": model or [],
                    "deployments": [{"name": "e1", "dialect": "openai", "base_url": url}]}],
        "teams": [{"name": "t", "guardrails": team or []}],
        "keys": [{"id": "k1", "team": "t", "key": KEY, "guardrails": key or []}],
    })


def streamed_text(body: str) -> str:
    """The answer's text from an OpenAI chat or an Anthropic Messages stream."""
    out = []
    for line in body.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("type") == "content_block_delta":
            out.append(ev["delta"].get("text", ""))
        for c in ev.get("choices") or []:
            out.append((c.get("delta") or {}).get("content") or "")
    return "".join(out)
