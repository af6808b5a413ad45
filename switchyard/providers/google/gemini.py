"""Google's generateContent API, as the Gemini API (``x-goog-api-key``) and Vertex AI (an OAuth
token, see ``switchyard.providers.google.vertex``) both serve it: the codec.

Wire facts (google-genai's types): ``systemInstruction`` apart from ``contents``; roles user and
model; tool calls are ``functionCall`` parts (``args`` an object), results ``functionResponse``
parts (``response`` an object) matched by function name; sampling fields in ``generationConfig``
(``candidateCount`` is ``n``; logprobs exist); ``toolConfig.functionCallingConfig`` mode AUTO, ANY
(with ``allowedFunctionNames`` for a named tool) or NONE. Answers are read in
``answers.py``; embeddings are ``embed.py``.

Thoughts come back (``thought: true`` parts) only when ``generationConfig.thinkingConfig`` asks
(``includeThoughts``), and a model that does not think refuses any thinkingConfig with a 400
("thinking_config is not supported"; Vertex: "thinking is not supported by this model"): it is
sent only to the thinking models, told by name (``thinks``).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from switchyard.core.canonical import CanonicalRequest, Chunk, RequestKind
from switchyard.core.deployments import DeploymentConfig
from switchyard.dialects.anthropic.wire import THINKING_BUDGET
from switchyard.dialects.reasoning import thinking_budget
from switchyard.providers.emulation import Emulation
from switchyard.providers.google import answers
from switchyard.providers.google.embed import with_embeddings
from switchyard.providers.turns import (
    Turn,
    alternate,
    check_fields,
    read_turns,
    refuse,
    stops,
    tool_plan,
)
from switchyard.providers.wire import Caps, Lanes, Wire, header_auth

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
# The thinking models (Google's thinking guide and google-genai's ThinkingConfig: Gemini 2.5 and 3
# and later, and the -latest aliases, which point at them), less the 2.5 image and speech models,
# which take no thinkingConfig. A name this does not know gets none: a missed summary, never a 400.
_THINKS = re.compile(r"gemini-(?:2\.5-(?!.*-image)|[3-9]|(?:flash|flash-lite|pro)-latest)")
_NO_THOUGHTS = ("-tts",)
# Flash-Lite does not think unless told (includeThoughts alone is refused: "only enabled when
# thinking is enabled"): a budget is sent with it, the caller's or -1 (dynamic).
_THINKS_IF_TOLD = "flash-lite"
# Every thinking model takes budgets up to 24576 (2.5 Pro up to 32768); a larger one is refused
# ("The thinking budget (N) is invalid"), so it is lowered. Anthropic's floor (1024) is above
# every model's (Pro 128, Flash-Lite 512).
MAX_BUDGET = 24576


def thinks(model: str) -> bool:
    """Whether a Gemini model (by its name, a resource path's last part) takes thinkingConfig."""
    name = model.rsplit("/", 1)[-1].lower()
    return _THINKS.match(name) is not None and not any(t in name for t in _NO_THOUGHTS)


def thinking_config(req: CanonicalRequest, model: str) -> dict[str, Any] | None:
    """The thinkingConfig asking for thought parts, when the caller asked to see the reasoning
    and the model thinks (None otherwise: nothing is sent)."""
    budget = thinking_budget(req)  # the caller's, else its reasoning effort's
    if not (req.show_reasoning or budget is not None) or not thinks(model):
        return None
    config: dict[str, Any] = {"includeThoughts": True} if req.show_reasoning else {}
    if budget is not None:
        config["thinkingBudget"] = min(budget, MAX_BUDGET)
    elif _THINKS_IF_TOLD in model.rsplit("/", 1)[-1].lower():
        config["thinkingBudget"] = -1
    return config


class GeminiCodec:
    """Stateless; one per process (``GEMINI``). ``provider``: the name refusals use."""

    @property
    def lanes(self) -> Lanes:
        return Lanes(carries=self.carries)

    def carries(self, model: str) -> frozenset[str]:
        """A thinking model takes the caller's reasoning budget (``thinking_config``)."""
        return frozenset({THINKING_BUDGET}) if thinks(model) else frozenset()

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
                config["responseMimeType"] = "application/json"  # the constraint is the bare schema
                config["responseJsonSchema"] = c.value if isinstance(c.value, dict) else {}
            else:
                raise refuse(
                    req, "constraint", self.provider, f"{c.kind} constraints; JSON schemas are carried"
                )
        if (thinking := thinking_config(req, model)) is not None:
            config["thinkingConfig"] = thinking
        if config:
            body["generationConfig"] = config
        fns, mode, name = tool_plan(req)
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
            calling: dict[str, Any] = {"mode": {"auto": "AUTO", "none": "NONE"}.get(mode, "ANY")}
            if mode == "tool":
                calling["allowedFunctionNames"] = [name]
            body["toolConfig"] = {"functionCallingConfig": calling}
        return body, emulation

    def whole(self, raw: bytes, req: CanonicalRequest) -> list[Chunk]:
        return answers.whole(raw)

    def stream(self, req: CanonicalRequest) -> answers.GeminiStream:
        return answers.GeminiStream(req.n or 1)


def _contents(turns: list[Turn]) -> list[dict[str, Any]]:
    """Gemini turns: user (tool results too, as functionResponse parts) and model."""
    return alternate(turns, lambda t: "model" if t.role == "assistant" else "user", _parts, "parts")


def _parts(t: Turn) -> list[dict[str, Any]]:
    if t.role == "tool":
        text = "".join(v for k, v in t.parts if k == "text")
        return [{"functionResponse": {"name": t.name or "", "response": _response(text)}}]
    parts: list[dict[str, Any]] = [
        {"text": value} if kind == "text" else {"inlineData": {"mimeType": value[0], "data": value[1]}}
        for kind, value in t.parts
    ]
    return parts + [{"functionCall": {"name": c.name, "args": c.args}} for c in t.calls]


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
