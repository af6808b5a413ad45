"""The Anthropic Messages codec (the ``Codec`` protocol of providers/wire.py), and its native lane."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from switchyard.core.canonical import CanonicalRequest, Chunk
from switchyard.core.deployments import DeploymentConfig
from switchyard.dialects.anthropic.wire import DEFAULT_MAX_TOKENS
from switchyard.providers.anthropic import answers as decode
from switchyard.providers.anthropic import request
from switchyard.providers.emulation import Emulation
from switchyard.providers.wire import CountLane, Lanes

# The Messages API's body fields (anthropic SDK ``MessageCreateParams``): a native body keeps
# these as the caller wrote them; any other field passes only if the deployment allows it.
MESSAGES_FIELDS = frozenset({
    "model", "messages", "max_tokens", "system", "stop_sequences", "stream", "temperature", "top_p",
    "top_k", "tools", "tool_choice", "metadata", "thinking", "output_config", "service_tier",
    "container", "context_management", "mcp_servers", "inference_geo", "speed", "cache_control"})


@dataclass(frozen=True, slots=True)
class AnthropicCodec:
    """One codec, three envelopes (docs/providers.md): the Anthropic API sends the body as is;
    Bedrock InvokeModel drops ``model`` and ``stream`` (the path says both) and Vertex rawPredict
    drops ``model``, each adding its ``anthropic_version`` (``envelope``)."""

    model_field: bool = True
    stream_field: bool = True
    envelope: Mapping[str, Any] = field(default_factory=dict)

    @property
    def lanes(self) -> Lanes:
        return Lanes(native_dialect="anthropic", native=self.native,
                     count=CountLane(self.count, self.counted), cache_breakpoints=auto_breakpoints)

    def render(self, req: CanonicalRequest, model: str,
               dep: DeploymentConfig) -> tuple[dict[str, Any], Emulation]:
        body, emulation = request.render(req, model, dep)
        return self._wrap(body), emulation

    def _wrap(self, body: dict[str, Any]) -> dict[str, Any]:
        if not self.model_field:
            body.pop("model", None)
        if not self.stream_field:
            body.pop("stream", None)
        if self.envelope:
            body.update(self.envelope)
        return body

    def whole(self, raw: bytes, req: CanonicalRequest) -> list[Chunk]:
        return decode.whole(raw, thinking=req.native is not None)

    def stream(self, req: CanonicalRequest) -> decode.MessageStream:
        # Thinking blocks go back only to a caller that spoke this API (it must return them).
        return decode.MessageStream(thinking=req.native is not None)

    def native(self, body: dict[str, Any], req: CanonicalRequest, model: str,
               allow_params: list[str] | None = None) -> dict[str, Any]:
        """The caller's own Messages body, kept as sent (cache_control placement, system blocks,
        thinking blocks and their signatures, field order) except what the gateway owns: the
        upstream's model name, max_tokens capped at what was admitted (``req.max_tokens``),
        ``stream`` as served, and thinking blocks this gateway wrote unsigned (``unsigned``).
        Fields outside the Messages API pass only when allowed."""
        allowed = allow_params or []
        out: dict[str, Any] = {}
        for k, v in body.items():
            if k in MESSAGES_FIELDS or "*" in allowed or k in allowed:
                out[k] = v
        if isinstance(out.get("messages"), list):
            out["messages"] = unsigned(out["messages"])
        out["model"] = model
        asked = body.get("max_tokens")
        cap = req.max_tokens if req.max_tokens is not None and req.max_tokens > 0 else None
        if not isinstance(asked, int) or asked <= 0:
            out["max_tokens"] = cap or DEFAULT_MAX_TOKENS
        elif cap is not None and asked > cap:
            out["max_tokens"] = cap
        if req.stream:
            out["stream"] = True
        else:
            out.pop("stream", None)
        return self._wrap(out)

    def count(self, body: dict[str, Any], model: str,
              allow_params: list[str] | None = None) -> dict[str, Any]:
        """The caller's count_tokens body for the upstream's own count: the Messages fields as
        sent (no max_tokens or stream: the count endpoint refuses them), the upstream's model."""
        allowed = allow_params or []
        out = {k: v for k, v in body.items()
               if (k in MESSAGES_FIELDS or "*" in allowed or k in allowed)
               and k not in ("max_tokens", "stream")}
        if isinstance(out.get("messages"), list):
            out["messages"] = unsigned(out["messages"])
        out["model"] = model
        if self.envelope:
            out.update(self.envelope)
        return out

    def counted(self, raw: bytes) -> int | None:
        """``{"input_tokens": N}``; None when the answer is not that (the estimate stands in)."""
        return count_field(raw, "input_tokens")


# About 1024 tokens at 4 characters a token: Anthropic caches no shorter prefix, so a breakpoint
# on less would only cost the cache-write premium's bookkeeping for nothing.
AUTO_CACHE_CHARS = 4096
_EPHEMERAL = {"type": "ephemeral"}


def auto_breakpoints(body: dict[str, Any]) -> bool:
    """``prompt_cache: auto``: when the caller marked nothing, put ``cache_control`` on the last
    tool of a long tool list and on the last block of a system prompt that, with the tools before
    it, is long (the cache's prefix is tools, then system, then messages). True when it placed any."""
    if b'"cache_control"' in msgspec.json.encode(body):
        return False  # the caller chose its breakpoints
    tools, system = body.get("tools"), body.get("system")
    tools_chars = len(msgspec.json.encode(tools)) if isinstance(tools, list) and tools else 0
    if isinstance(system, str):
        system = [{"type": "text", "text": system}] if system else None
    sys_chars = sum(len(b.get("text") or "") for b in system if isinstance(b, dict)) \
        if isinstance(system, list) else 0
    placed = False
    if tools_chars >= AUTO_CACHE_CHARS and isinstance(tools, list) and isinstance(tools[-1], dict):
        body["tools"] = [*tools[:-1], {**tools[-1], "cache_control": _EPHEMERAL}]
        placed = True
    if sys_chars and tools_chars + sys_chars >= AUTO_CACHE_CHARS and isinstance(system, list) \
            and isinstance(system[-1], dict):
        body["system"] = [*system[:-1], {**system[-1], "cache_control": _EPHEMERAL}]
        placed = True
    return placed


def unsigned(messages: list[Any]) -> list[Any]:
    """The messages less the ``thinking`` blocks with an empty signature: only this gateway writes
    those (another backend's reasoning shown as thinking), and Claude refuses them ("Invalid
    `signature` in `thinking` block"). An assistant turn left empty goes too (Claude merges the
    user turns around it). Messages without such blocks are returned as they are (the same list)."""
    if not any(_has_unsigned(m) for m in messages):
        return messages
    out = []
    for m in messages:
        if not _has_unsigned(m):
            out.append(m)
            continue
        content = [b for b in m["content"] if not _is_unsigned(b)]
        if content:
            out.append({**m, "content": content})
    return out


def _is_unsigned(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "thinking" and block.get("signature") == ""


def _has_unsigned(m: Any) -> bool:
    return (isinstance(m, dict) and m.get("role") == "assistant" and isinstance(m.get("content"), list)
            and any(_is_unsigned(b) for b in m["content"]))


def count_field(raw: bytes, name: str) -> int | None:
    try:
        n = msgspec.json.decode(raw).get(name)
    except (msgspec.DecodeError, AttributeError):
        return None
    return n if isinstance(n, int) else None
