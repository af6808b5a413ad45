"""Google's generateContent API, as the Gemini API (``x-goog-api-key``) and Vertex AI (an OAuth
token, see ``switchyard.providers.vertex``) both serve it: the codec.

Wire facts (google-genai's types): ``systemInstruction`` apart from ``contents``; roles user and
model; tool calls are ``functionCall`` parts (``args`` an object), results ``functionResponse``
parts (``response`` an object) matched by function name; sampling fields in ``generationConfig``
(``candidateCount`` is ``n``; logprobs exist); ``toolConfig.functionCallingConfig`` mode AUTO, ANY
(with ``allowedFunctionNames`` for a named tool) or NONE. Answers are read in
``gemini_answers.py``; embeddings are ``gemini_embed.py``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from switchyard.core.canonical import CanonicalRequest, Chunk, RequestKind
from switchyard.core.deployments import DeploymentConfig
from switchyard.core.errors import InvalidRequest
from switchyard.dialects.outgoing import Emulation
from switchyard.providers import gemini_answers as answers
from switchyard.providers.gemini_embed import with_embeddings
from switchyard.providers.turns import (
    Turn,
    check_fields,
    choice_of,
    read_turns,
    refuse,
    stops,
    tool_functions,
)
from switchyard.providers.wire import Caps, Wire, header_auth, register

CARRIED = (
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "n",
    "logprobs",
    "tools",
    "tool_choice",
    "constraint",
)
_CONFIG = {
    "max_tokens": "maxOutputTokens",
    "temperature": "temperature",
    "top_p": "topP",
    "top_k": "topK",
    "seed": "seed",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
    "n": "candidateCount",
}


class GeminiCodec:
    """Stateless; one per process (``GEMINI``). ``provider``: the name refusals use."""

    def __init__(self, provider: str = "gemini") -> None:
        self.provider = provider

    def render(
        self, req: CanonicalRequest, model: str, dep: DeploymentConfig | None = None
    ) -> tuple[dict[str, Any], Emulation]:
        check_fields(req, CARRIED, self.provider)
        emulation = Emulation()
        system, turns = read_turns(req, self.provider)
        body: dict[str, Any] = {"contents": _contents(turns)}
        if system:
            body["systemInstruction"] = {"parts": [{"text": s} for s in system]}
        config: dict[str, Any] = {}
        said = req.said()
        for fld, key in _CONFIG.items():
            if fld in said and not (fld == "max_tokens" and said[fld] < 0):
                config[key] = said[fld]
        if (stop := stops(req, emulation)) is not None:
            config["stopSequences"] = stop
        if req.logprobs is not None:
            config["responseLogprobs"] = True
            if req.logprobs > 0:
                config["logprobs"] = req.logprobs
        if req.constraint is not None:
            c = req.constraint
            if c.kind == "json_object":
                config["responseMimeType"] = "application/json"
            elif c.kind == "json_schema":
                value = c.value if isinstance(c.value, dict) else {}
                schema = value["schema"] if "schema" in value and "name" in value else value
                config["responseMimeType"] = "application/json"
                config["responseJsonSchema"] = schema
            else:
                raise refuse(
                    req, "constraint", self.provider, f"{c.kind} constraints; JSON schemas are carried"
                )
        if config:
            body["generationConfig"] = config
        fns = tool_functions(req)
        mode, name = choice_of(req)
        if fns:
            body["tools"] = [
                {
                    "functionDeclarations": [
                        {
                            "name": f["name"],
                            **({"description": f["description"]} if f.get("description") else {}),
                            **({"parametersJsonSchema": f["parameters"]} if f.get("parameters") else {}),
                        }
                        for f in fns
                    ]
                }
            ]
            if mode == "tool" and name not in {f["name"] for f in fns}:
                raise InvalidRequest(
                    f"tool_choice names {name!r}, which is not in tools", param="tool_choice"
                )
            calling: dict[str, Any] = {"mode": {"auto": "AUTO", "none": "NONE"}.get(mode, "ANY")}
            if mode == "tool":
                calling["allowedFunctionNames"] = [name]
            body["toolConfig"] = {"functionCallingConfig": calling}
        elif mode in ("required", "tool"):
            raise InvalidRequest("tool_choice asks for a tool call but tools lists none", param="tool_choice")
        return body, emulation

    def whole(self, raw: bytes, req: CanonicalRequest) -> list[Chunk]:
        return answers.whole(raw)

    def stream(self, req: CanonicalRequest) -> answers.GeminiStream:
        return answers.GeminiStream(req.n or 1)


def _contents(turns: list[Turn]) -> list[dict[str, Any]]:
    """Gemini turns: user (tool results too, as functionResponse parts) and model; consecutive
    turns of one role merge."""
    out: list[dict[str, Any]] = []
    for t in turns:
        role = "model" if t.role == "assistant" else "user"
        parts: list[dict[str, Any]] = []
        if t.role == "tool":
            text = "".join(v for k, v in t.parts if k == "text")
            parts.append({"functionResponse": {"name": t.name or "", "response": _response(text)}})
        else:
            for kind, value in t.parts:
                parts.append(
                    {"text": value}
                    if kind == "text"
                    else {"inlineData": {"mimeType": value[0], "data": value[1]}}
                )
            parts += [{"functionCall": {"name": c.name, "args": c.args}} for c in t.calls]
        if not parts:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["parts"] += parts
        else:
            out.append({"role": role, "parts": parts})
    return out


def _response(text: str) -> dict[str, Any]:
    """A tool's result as the object functionResponse.response must be."""
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return {"content": text}
    return value if isinstance(value, dict) else {"content": value}


# -- the row ---------------------------------------------------------------------------------------

GEMINI = GeminiCodec()
# n is candidateCount (one call); several prompts are the router's fan-out.
CAPS = Caps(n=True, chat_n=True, best_of=False, prompts=False)


_BASE = "/v1beta/models/{model}"


def gemini_paths(base: str) -> dict[tuple[RequestKind, bool], str]:
    """``base``: the path to the model (``{model}`` in it); the method decides the stream."""
    return {
        (kind, stream): base + (":streamGenerateContent?alt=sse" if stream else ":generateContent")
        for kind in ("chat", "completion")
        for stream in (False, True)
    }


_ROW = Wire("gemini", GEMINI, gemini_paths(_BASE), auth=header_auth("x-goog-api-key"), caps=CAPS)
GEMINI_ROW = with_embeddings(_ROW, _BASE, "gemini")
register("gemini", GEMINI_ROW)
