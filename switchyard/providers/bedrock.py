"""AWS Bedrock Runtime's Converse API (``/model/{id}/converse``, ``/converse-stream``): the codec
(canonical request -> Converse body; answers and ConverseStream events -> canonical chunks) and the
Bedrock row (its auth: bedrock_auth.py; InvokeModel rows: bedrock_claude.py, bedrock_embed.py).

Wire facts (botocore's bedrock-runtime service model): ``system[]`` apart from ``messages``;
tool calls are ``toolUse`` blocks whose ``input`` is an object, results ``toolResult`` blocks in a
user turn; ``toolChoice`` has auto, any and tool but no none (tools are dropped instead, unless the
history holds a ``toolUse``: then ``toolConfig`` is required and stays, without a choice); a JSON
schema output goes as a *string*. Streams are event-stream frames; ``metadata`` (the usage) comes
after ``messageStop``, so the finish waits for it. ``inputTokens`` excludes cache reads and
writes; the canonical ``prompt_tokens`` includes them (OpenAI's meaning).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import msgspec

from switchyard.core.canonical import CanonicalRequest, Chunk, FinishReason, RequestKind, Usage
from switchyard.core.deployments import DeploymentConfig
from switchyard.core.errors import RETRY_STATUSES, InvalidRequest, UpstreamError
from switchyard.dialects.outgoing import Emulation
from switchyard.providers.aws.eventstream import CONTENT_TYPE, FrameError, named_frames
from switchyard.providers.bedrock_auth import bedrock_auth
from switchyard.providers.bedrock_embed import embed_row, family
from switchyard.providers.turns import (
    Turn,
    check_fields,
    choice_of,
    dumps,
    read_turns,
    refuse,
    stops,
    tool_functions,
)
from switchyard.providers.wire import Caps, Wire, WireError, register

PROVIDER = "bedrock"
FINISH: Mapping[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
    "malformed_model_output": "error",
    "malformed_tool_use": "error",
}
# In-stream exceptions (ConverseStreamOutput's error members) another attempt may cure, when
# nothing of the answer has reached the caller yet.
RETRYABLE_EXCEPTIONS = frozenset(
    {"throttlingException", "serviceUnavailableException", "internalServerException"}
)
# requestMetadata values (the service model's RequestMetadataValueString)
_METADATA_VALUE = re.compile(r"[a-zA-Z0-9\s:_@$#=/+,\-.]{0,256}")
CARRIED = ("max_tokens", "temperature", "top_p", "top_k", "tools", "tool_choice", "constraint", "user")
_IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}


class ConverseCodec:
    """Stateless; one per process (``CONVERSE``)."""

    def render(
        self, req: CanonicalRequest, model: str, dep: DeploymentConfig | None = None
    ) -> tuple[dict[str, Any], Emulation]:
        check_fields(req, CARRIED, PROVIDER)
        if req.n is not None and req.n > 1:
            raise refuse(req, "n", PROVIDER, "one choice per call")
        emulation = Emulation()
        system, turns = read_turns(req, PROVIDER)
        body: dict[str, Any] = {"messages": _messages(turns)}
        if system:
            body["system"] = [{"text": s} for s in system]
        inference: dict[str, Any] = {}
        if req.max_tokens is not None and req.max_tokens >= 0:
            inference["maxTokens"] = req.max_tokens
        if req.temperature is not None:
            inference["temperature"] = req.temperature
        if req.top_p is not None:
            inference["topP"] = req.top_p
        if (stop := stops(req, emulation)) is not None:
            inference["stopSequences"] = stop
        if inference:
            body["inferenceConfig"] = inference
        if req.top_k is not None:
            body["additionalModelRequestFields"] = {"top_k": req.top_k}
        tools = _tool_config(req, any(t.calls for t in turns))
        if tools is not None:
            body["toolConfig"] = tools
        if req.constraint is not None:
            body["outputConfig"] = {"textFormat": _text_format(req)}
        if req.user is not None:
            if not _METADATA_VALUE.fullmatch(req.user):
                raise refuse(
                    req,
                    "user",
                    PROVIDER,
                    "Bedrock's request metadata takes at most 256 of letters, digits, spaces and :_@$#=/+,-.",
                )
            body["requestMetadata"] = {"user": req.user}
        return body, emulation

    def whole(self, raw: bytes, req: CanonicalRequest) -> list[Chunk]:
        try:
            obj = _decode_answer(raw)
        except msgspec.DecodeError:
            raise WireError("sent a malformed answer") from None
        if obj.output is None or obj.output.message is None:
            raise WireError("sent an answer without an output message")
        text: list[str] = []
        calls: list[dict[str, Any]] = []
        for block in obj.output.message.content or ():
            if block.text is not None:
                text.append(block.text)
            elif block.toolUse is not None:
                u = block.toolUse
                calls.append(
                    {
                        "index": len(calls),
                        "id": u.get("toolUseId"),
                        "type": "function",
                        "function": {"name": u.get("name"), "arguments": dumps(u.get("input") or {})},
                    }
                )
        return [
            Chunk(
                index=0,
                text="".join(text),
                role="assistant",
                tool_calls=calls or None,
                finish_reason=FINISH.get(obj.stopReason or "", "stop"),
                usage=usage_of(obj.usage),
            )
        ]

    def stream(self, req: CanonicalRequest) -> ConverseStream:
        return ConverseStream()


class _Usage(msgspec.Struct):
    inputTokens: int = 0
    outputTokens: int = 0
    cacheReadInputTokens: int = 0
    cacheWriteInputTokens: int = 0


class _Block(msgspec.Struct):
    text: str | None = None
    toolUse: dict[str, Any] | None = None


class _Message(msgspec.Struct):
    content: list[_Block] | None = None


class _Output(msgspec.Struct):
    message: _Message | None = None


class _Answer(msgspec.Struct):
    output: _Output | None = None
    stopReason: str | None = None
    usage: _Usage | None = None


class _Delta(msgspec.Struct):
    text: str | None = None
    toolUse: dict[str, Any] | None = None


class _Event(msgspec.Struct):
    """Any ConverseStream event's fields (one event has a few of them)."""

    contentBlockIndex: int = 0
    delta: _Delta | None = None
    start: dict[str, Any] | None = None
    stopReason: str | None = None
    usage: _Usage | None = None
    message: str | None = None  # an exception's text


_decode_answer = msgspec.json.Decoder(_Answer).decode
_decode_event = msgspec.json.Decoder(_Event).decode


def usage_of(u: _Usage | None) -> Usage | None:
    if u is None:
        return None
    cached, written = u.cacheReadInputTokens, u.cacheWriteInputTokens
    return Usage(
        prompt_tokens=u.inputTokens + cached + written,
        completion_tokens=u.outputTokens,
        cached_tokens=cached,
        cache_write_tokens=written,
    )


class ConverseStream:
    """One ConverseStream answer, event by event (``name``: the frame's ``:event-type``, or for an
    exception frame its ``:exception-type``). The finish reason waits for ``metadata``."""

    __slots__ = ("_finish", "_sent", "_tools", "done")

    def __init__(self) -> None:
        self.done = False
        self._sent = False  # a chunk went out (the role rides on the first)
        self._finish: FinishReason | None = None
        self._tools: dict[int, int] = {}  # contentBlockIndex -> the tool call's OpenAI index

    def feed(self, name: bytes | None, data: bytes) -> list[Chunk]:
        kind = (name or b"").decode()
        try:
            ev = _decode_event(data) if data else _Event()
        except msgspec.DecodeError:
            raise WireError(f"sent a malformed {kind or 'stream'} event") from None
        out: list[Chunk]
        if kind == "contentBlockDelta" and ev.delta is not None:
            d = ev.delta
            if d.text is not None:
                out = [Chunk(text=d.text)] if d.text else []
            elif d.toolUse is not None:
                k = self._tools.get(ev.contentBlockIndex)
                if k is None:
                    raise WireError("sent tool input for a block that started no tool call")
                out = [
                    Chunk(tool_calls=[{"index": k, "function": {"arguments": d.toolUse.get("input") or ""}}])
                ]
            else:
                out = []  # reasoning and citations: not carried to OpenAI-shaped callers
        elif kind == "contentBlockStart" and ev.start is not None and "toolUse" in ev.start:
            u = ev.start["toolUse"]
            k = self._tools[ev.contentBlockIndex] = len(self._tools)
            out = [
                Chunk(
                    tool_calls=[
                        {
                            "index": k,
                            "id": u.get("toolUseId"),
                            "type": "function",
                            "function": {"name": u.get("name"), "arguments": ""},
                        }
                    ]
                )
            ]
        elif kind == "messageStop":
            self._finish = FINISH.get(ev.stopReason or "", "stop")
            return []
        elif kind == "metadata":
            if self._finish is None:
                raise WireError("sent the stream's metadata before its messageStop")
            self.done = True
            out = [Chunk(finish_reason=self._finish, usage=usage_of(ev.usage))]
        elif kind.endswith("Exception"):
            raise WireError(
                f"reported {kind}" + (" mid-stream" if self._sent else ""),
                ev.message,
                retryable=not self._sent and kind in RETRYABLE_EXCEPTIONS,
                status=429 if kind == "throttlingException" and not self._sent else 502,
            )
        else:
            return []  # messageStart, contentBlockStop, and events this gateway does not read
        if out and not self._sent:
            out[0].role = "assistant"
            self._sent = True
        return out

    def ending(self) -> str | None:
        if self.done:
            return None
        if self._finish is not None:
            return "ended the stream after messageStop without its metadata event (the usage)"
        return "ended the stream before it finished"


def _messages(turns: list[Turn]) -> list[dict[str, Any]]:
    """Converse turns alternate user/assistant: tool results join a user turn, and consecutive
    turns of one role merge."""
    out: list[dict[str, Any]] = []
    for t in turns:
        role = "assistant" if t.role == "assistant" else "user"
        content: list[dict[str, Any]] = []
        if t.role == "tool":
            result = [{"text": v} for k, v in t.parts if k == "text"] or [{"text": ""}]
            content.append({"toolResult": {"toolUseId": t.call_id, "content": result}})
        else:
            for kind, value in t.parts:
                if kind == "text":
                    content.append({"text": value})
                else:
                    mime, data = value
                    fmt = _IMAGE_FORMATS.get(mime)
                    if fmt is None:
                        raise InvalidRequest(
                            f"image type {mime!r} is not one Bedrock takes "
                            f"({', '.join(sorted(_IMAGE_FORMATS))})",
                            param="messages",
                        )
                    content.append({"image": {"format": fmt, "source": {"bytes": data}}})
            content += [{"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.args}} for c in t.calls]
        if not content:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"] += content
        else:
            out.append({"role": role, "content": content})
    return out


def _tool_config(req: CanonicalRequest, history_calls: bool) -> dict[str, Any] | None:
    fns = tool_functions(req)
    mode, name = choice_of(req)
    if not fns:
        if mode in ("required", "tool"):
            raise InvalidRequest("tool_choice asks for a tool call but tools lists none", param="tool_choice")
        if history_calls:
            raise InvalidRequest(
                "the messages hold tool calls, so Bedrock needs the tools they call: send them in tools",
                param="tools",
            )
        return None
    specs = [
        {
            "toolSpec": {
                "name": f["name"],
                **({"description": f["description"]} if f.get("description") else {}),
                "inputSchema": {"json": f.get("parameters") or {"type": "object", "properties": {}}},
            }
        }
        for f in fns
    ]
    if mode == "none":  # Converse has no "none": send no tools, unless the history needs them
        return {"tools": specs} if history_calls else None
    if mode == "tool" and name not in {f["name"] for f in fns}:
        raise InvalidRequest(f"tool_choice names {name!r}, which is not in tools", param="tool_choice")
    choices: dict[str, dict[str, Any]] = {"auto": {"auto": {}}, "required": {"any": {}}}
    choice = choices.get(mode) or {"tool": {"name": name}}
    return {"tools": specs, "toolChoice": choice}


def _text_format(req: CanonicalRequest) -> dict[str, Any]:
    c = req.constraint
    assert c is not None
    if c.kind == "json_object":
        schema: Any = {"type": "object"}
        name = "json_object"
    elif c.kind == "json_schema":
        value = c.value if isinstance(c.value, dict) else {}
        # OpenAI's response_format carries {name, schema, strict}; other dialects the schema alone.
        schema = value.get("schema", value) if "schema" in value and "name" in value else value
        name = str(value.get("name") or "response") if "schema" in value else "response"
    else:
        raise refuse(req, "constraint", PROVIDER, f"{c.kind} constraints; JSON schemas are carried")
    return {"type": "json_schema", "structure": {"jsonSchema": {"schema": dumps(schema), "name": name}}}


# -- the row ---------------------------------------------------------------------------------------

CONVERSE = ConverseCodec()
CAPS = Caps(n=False, chat_n=False, best_of=False, prompts=False)  # the router fans out n and prompts
PATHS: dict[tuple[RequestKind, bool], str] = {
    (kind, stream): "/model/{model}/converse-stream" if stream else "/model/{model}/converse"
    for kind in ("chat", "completion")
    for stream in (False, True)
}


async def converse_frames(
    deployment: str, chunks: AsyncIterator[bytes]
) -> AsyncIterator[list[tuple[bytes | None, bytes]]]:
    """The event-stream frames as (name, payload); a corrupt or cut stream is the deployment's
    broken answer (after what came before it)."""
    try:
        async for batch in named_frames(chunks):
            yield batch
    except FrameError as e:
        raise UpstreamError.broken(deployment, f"sent a broken event stream ({e})") from None


def bedrock_row(dep: DeploymentConfig) -> Wire:
    # SigV4 signs the whole path: a base_url with a path of its own (a proxy) prefixes the target.
    prefix = urlsplit(dep.base_url or "").path.rstrip("/")
    row = Wire(
        "bedrock",
        CONVERSE,
        PATHS,
        auth=lambda d: bedrock_auth(d, prefix),
        framing=partial(converse_frames, dep.name),
        stream_type=CONTENT_TYPE,
        # ModelErrorException (424) is the model's failure, not the caller's: another
        # deployment may serve (ThrottlingException and ModelNotReadyException are 429s).
        retry_statuses=RETRY_STATUSES | {424},
        caps=CAPS,
    )
    if family(dep.model) is not None:  # an embeddings model: InvokeModel with its own body
        return embed_row(row, dep.model)
    if dep.api == "invoke":  # Claude's own Messages body through InvokeModel
        from switchyard.providers.bedrock_claude import invoke_row

        return invoke_row(row)
    return row


register("bedrock", bedrock_row)
