"""Claude on Bedrock's InvokeModel (``/model/{id}/invoke``, ``/invoke-with-response-stream``): the
Anthropic Messages codec in Bedrock's envelope, for a bedrock deployment with ``api: invoke``.

The body is the Messages body without ``model`` and ``stream`` (the path says both), with
``anthropic_version: bedrock-2023-05-31`` and, when the caller sent ``anthropic-beta``, the betas
as the body array ``anthropic_beta``. The whole answer is the Anthropic ``Message`` JSON. A stream
is event-stream frames: each ``chunk`` event's payload is ``{"bytes": base64(one Anthropic stream
event's JSON)}``, read by the Anthropic stream decoder; exception frames are read as Converse's
are. Auth, framing and error statuses are the Converse row's (aws/converse.py).

An Anthropic Messages caller takes the native lane: its body goes as sent (system blocks,
cache_control, thinking signatures) but for what the gateway owns, in the same envelope; its
``count_tokens`` asks Bedrock's CountTokens (``/model/{id}/count-tokens``) over that body.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from typing import Any

import msgspec

from switchyard.core.canonical import CanonicalRequest, Chunk, RequestKind
from switchyard.core.deployments import DeploymentConfig
from switchyard.core.errors import InvalidRequest
from switchyard.providers.anthropic import answers as decode
from switchyard.providers.anthropic.codec import AnthropicCodec, count_field
from switchyard.providers.aws.converse_answers import RETRYABLE_EXCEPTIONS
from switchyard.providers.emulation import Emulation
from switchyard.providers.wire import CountLane, Lanes, Wire, WireError

VERSION = "bedrock-2023-05-31"  # the anthropic_version Bedrock documents for InvokeModel
BETA = "anthropic-beta"
_BETA_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
MAX_BETAS = 32
PATHS: dict[tuple[RequestKind, bool], str] = {
    (kind, stream): "/model/{model}/invoke-with-response-stream" if stream else "/model/{model}/invoke"
    for kind in ("chat", "completion")
    for stream in (False, True)
}


class _Chunk(msgspec.Struct):
    bytes: str = ""


class _Exception(msgspec.Struct):
    message: str | None = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_decode_exception = msgspec.json.Decoder(_Exception).decode


def betas(req: CanonicalRequest) -> list[str]:
    """The caller's ``anthropic-beta`` header (comma-separated names), checked: names only."""
    native = req.native
    said = native.headers.get(BETA, "") if native is not None and native.api == "anthropic" else ""
    names = [b.strip() for b in said.split(",") if b.strip()]
    if len(names) > MAX_BETAS or not all(_BETA_NAME.fullmatch(b) for b in names):
        raise InvalidRequest(f"anthropic-beta takes at most {MAX_BETAS} comma-separated beta names "
                             "(letters, digits, '.', '_', '-')", param=BETA)
    return names


class InvokeCodec:
    """The Anthropic codec's body and whole answers; the stream unwrapped from ``chunk`` frames."""

    __slots__ = ()
    inner = AnthropicCodec(model_field=False, stream_field=False, envelope={"anthropic_version": VERSION})

    @property
    def lanes(self) -> Lanes:
        """The Anthropic codec's, with this envelope's own native body and count."""
        return dataclasses.replace(self.inner.lanes, native=self.native,
                                   count=CountLane(self.count, self.counted))

    def render(self, req: CanonicalRequest, model: str,
               dep: DeploymentConfig) -> tuple[dict[str, Any], Emulation]:
        body, emulation = self.inner.render(req, model, dep)
        if names := betas(req):
            body["anthropic_beta"] = names
        return body, emulation

    def native(self, body: dict[str, Any], req: CanonicalRequest, model: str,
               allow_params: list[str] | None = None) -> dict[str, Any]:
        """An Anthropic caller's body as sent, in InvokeModel's envelope (see AnthropicCodec.native)."""
        out = self.inner.native(body, req, model, allow_params)
        if names := betas(req):
            out["anthropic_beta"] = names
        return out

    def count(self, body: dict[str, Any], model: str,
              allow_params: list[str] | None = None) -> dict[str, Any]:
        """CountTokens over the InvokeModel body it would send (a blob: base64 in JSON). That
        body needs a max_tokens, which does not change the count."""
        invoke = self.inner.count(body, model, allow_params)
        invoke.pop("model", None)
        invoke["max_tokens"] = 1
        return {"input": {"invokeModel": {"body": base64.b64encode(msgspec.json.encode(invoke)).decode()}}}

    def counted(self, raw: bytes) -> int | None:
        return count_field(raw, "inputTokens")

    def whole(self, raw: bytes, req: CanonicalRequest) -> list[Chunk]:
        return self.inner.whole(raw, req)

    def stream(self, req: CanonicalRequest) -> InvokeStream:
        return InvokeStream()


class InvokeStream:
    """One InvokeModelWithResponseStream answer (``name``: the frame's ``:event-type``, or for an
    exception frame its ``:exception-type``)."""

    __slots__ = ("inner",)

    def __init__(self) -> None:
        self.inner = decode.MessageStream()

    @property
    def done(self) -> bool:
        return self.inner.done

    def feed(self, name: bytes | None, data: bytes) -> list[Chunk]:
        kind = (name or b"").decode()
        if kind == "chunk":
            try:
                event = base64.b64decode(_decode_chunk(data).bytes, validate=True)
            except (msgspec.DecodeError, binascii.Error):
                raise WireError("sent a malformed chunk event") from None
            return self.inner.feed(None, event)
        if kind.endswith("Exception"):
            try:
                said = _decode_exception(data).message if data else None
            except msgspec.DecodeError:
                said = None
            sent = self.inner.sent
            raise WireError(
                f"reported {kind}" + (" mid-stream" if sent else ""),
                said,
                retryable=not sent and kind in RETRYABLE_EXCEPTIONS,
                status=429 if kind == "throttlingException" and not sent else 502,
            )
        return []  # event types this gateway does not read

    def ending(self) -> str | None:
        return self.inner.ending()


INVOKE = InvokeCodec()


def invoke_row(converse: Wire) -> Wire:
    """The Converse row (auth, framing, statuses) with InvokeModel's paths and the Claude codec;
    an Anthropic caller's body takes the native lane (betas ride in the body, not as headers)."""
    return dataclasses.replace(converse, codec=INVOKE, paths=PATHS, count_path="/model/{model}/count-tokens")
