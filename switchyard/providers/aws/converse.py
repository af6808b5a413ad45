"""AWS Bedrock Runtime's Converse API (``/model/{id}/converse``, ``/converse-stream``): the codec
(canonical request -> Converse body; answers and ConverseStream events are read in
``converse_answers.py``) and the Bedrock row (its auth: auth.py; InvokeModel rows:
invoke_claude.py, invoke_embed.py).

Wire facts (botocore's bedrock-runtime service model): ``system[]`` apart from ``messages``;
tool calls are ``toolUse`` blocks whose ``input`` is an object, results ``toolResult`` blocks in a
user turn; ``toolChoice`` has auto, any and tool but no none (tools are dropped instead, unless the
history holds a ``toolUse``: then ``toolConfig`` is required and stays, without a choice); a JSON
schema output goes as a *string*; what one model family takes beyond the common fields goes in
``additionalModelRequestFields`` (Claude's ``top_k`` and ``thinking``).

Claude thinks on Converse only when asked (``thinking: {type: enabled, budget_tokens}``; Claude
refuses it without a budget, and older Claude models refuse it at all): asked only when the caller
asked to see reasoning *and* gave a budget (an Anthropic caller's ``thinking.budget_tokens``), of
the Claude models that think (3.7 Sonnet, Claude 4 and later, by model id).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from switchyard.core.canonical import CanonicalRequest, Chunk, RequestKind
from switchyard.core.deployments import DeploymentConfig
from switchyard.core.errors import RETRY_STATUSES, InvalidRequest, UpstreamError
from switchyard.dialects.anthropic.wire import THINKING_BUDGET
from switchyard.dialects.reasoning import claude_thinking, claude_thinks
from switchyard.providers.aws import converse_answers as answers
from switchyard.providers.aws.auth import bedrock_auth
from switchyard.providers.aws.eventstream import CONTENT_TYPE, FrameError, named_frames
from switchyard.providers.aws.invoke_embed import embed_row, family
from switchyard.providers.emulation import Emulation
from switchyard.providers.turns import (
    Turn,
    alternate,
    check_fields,
    dumps,
    read_turns,
    refuse,
    stops,
    tool_plan,
)
from switchyard.providers.wire import Caps, Lanes, Wire

PROVIDER = "bedrock"
# requestMetadata values (the service model's RequestMetadataValueString)
_METADATA_VALUE = re.compile(r"[a-zA-Z0-9\s:_@$#=/+,\-.]{0,256}")
CARRIED = ("max_tokens", "temperature", "top_p", "top_k", "tools", "tool_choice", "constraint", "user")
# Claude models that think (Claude 3.7 Sonnet; Claude 4 and later, Opus, Sonnet and Haiku), found
# in a model id, a cross-region profile's (us.anthropic...) or an inference profile's ARN.
_IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}


class ConverseCodec:
    """Stateless; one per process (``CONVERSE``)."""

    @property
    def lanes(self) -> Lanes:
        return Lanes(carries=self.carries)

    def carries(self, model: str) -> frozenset[str]:
        """Claude models that think take the caller's reasoning budget (``additionalModelRequestFields``)."""
        return frozenset({THINKING_BUDGET}) if claude_thinks(model) else frozenset()

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
        extra: dict[str, Any] = {}
        if req.top_k is not None:
            extra["top_k"] = req.top_k
        if thinking := claude_thinking(req, model, req.max_tokens):
            # Claude requires max_tokens above the budget: the Anthropic dialect checks it.
            extra["thinking"] = thinking
        if extra:
            body["additionalModelRequestFields"] = extra
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
        return answers.whole(raw)

    def stream(self, req: CanonicalRequest) -> answers.ConverseStream:
        return answers.ConverseStream()


def _messages(turns: list[Turn]) -> list[dict[str, Any]]:
    """Converse turns alternate user/assistant: tool results join a user turn."""
    return alternate(turns, lambda t: "assistant" if t.role == "assistant" else "user", _content)


def _content(t: Turn) -> list[dict[str, Any]]:
    if t.role == "tool":
        result = [{"text": v} for k, v in t.parts if k == "text"] or [{"text": ""}]
        return [{"toolResult": {"toolUseId": t.call_id, "content": result}}]
    content: list[dict[str, Any]] = []
    for kind, value in t.parts:
        if kind == "text":
            content.append({"text": value})
        else:
            mime, data = value
            fmt = _IMAGE_FORMATS.get(mime)
            if fmt is None:
                raise InvalidRequest(
                    f"image type {mime!r} is not one Bedrock takes ({', '.join(sorted(_IMAGE_FORMATS))})",
                    param="messages",
                )
            content.append({"image": {"format": fmt, "source": {"bytes": data}}})
    return content + [{"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.args}} for c in t.calls]


def _tool_config(req: CanonicalRequest, history_calls: bool) -> dict[str, Any] | None:
    fns, mode, name = tool_plan(req)
    if not fns:
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
        # Every inbound reader keeps the bare schema (OpenAI's name and strict are not carried).
        schema = c.value if isinstance(c.value, dict) else {}
        name = "response"
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
) -> AsyncGenerator[list[tuple[bytes | None, bytes]], None]:
    """The event-stream frames as (name, payload); a corrupt or cut stream is the deployment's
    broken answer (after what came before it)."""
    frames = named_frames(chunks)
    try:
        async for batch in frames:
            yield batch
    except FrameError as e:
        raise UpstreamError.broken(deployment, f"sent a broken event stream ({e})") from None
    finally:
        await frames.aclose()  # closed with this one (see provider._stream)


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
        from switchyard.providers.aws.invoke_claude import invoke_row

        return invoke_row(row)
    return row

