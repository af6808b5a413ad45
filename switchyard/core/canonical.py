"""The canonical request and the canonical chunks: the one model every dialect maps to and from.

Every field defaults to ``None`` meaning "the caller did not say". Backends that forward to an
upstream send only what was said (so the upstream's own defaults apply); the built-in engine fills
the gaps with the caller dialect's documented defaults (``CanonicalRequest.dialect`` names it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal, TypeVar, dataclass_transform

import msgspec

RequestKind = Literal["completion", "chat", "embedding"]
# A prompt is a string, a list of token ids, or llama.cpp's mixed list of ids and strings.
Prompt = str | list[int] | list[int | str]
ConstraintKind = Literal["json_schema", "json_object", "regex", "choice", "grammar", "lark"]
# What to do when prompt + max_tokens exceed the context window:
#   "truncate_max_tokens" lowers max_tokens to fit (Fireworks' default),
#   "truncate_prompt" cuts the prompt's start (mistral.rs truncate_sequence),
#   "error" refuses with a 400 that states the numbers (OpenAI, vLLM).
OverflowPolicy = Literal["truncate_max_tokens", "truncate_prompt", "error"]
FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "error"]

UNLIMITED = -1  # max_tokens: generate until EOS or the context window is full (llama.cpp's -1)

_T = TypeVar("_T")


if TYPE_CHECKING:
    # The type checker holds each call as ``dataclasses.replace``: field names and types.
    from dataclasses import replace as replace
else:
    def replace(obj, /, **changes):
        """``dataclasses.replace``, by position: a request's copy with a field changed is built
        from its 50 fields in order, 3-4 us against dataclasses.replace's 12-17 (which reads each
        field by name in Python, then passes them all by keyword). A request without max_tokens
        takes one copy (the admitted bound), one with a timeout two. A ``Chunk`` (a msgspec
        Struct) is copied by msgspec's own, checked only where no shape is kept: a request's copy
        pays no test for it."""
        cls = type(obj)
        shape = _SHAPES.get(cls)
        if shape is None:
            if issubclass(cls, msgspec.Struct):
                return msgspec.structs.replace(obj, **changes)
            shape = _SHAPES[cls] = _shape_of(cls)
        if not shape:
            return dataclasses.replace(obj, **changes)
        row_of, index = shape
        row = list(row_of(obj))
        for name, value in changes.items():
            i = index.get(name)
            if i is None:
                return dataclasses.replace(obj, **changes)  # (its own TypeError, naming the field)
            row[i] = value
        return cls(*row)


# A dataclass's (row getter, field -> position), or () where a copy cannot be made by position
# (a field not in __init__, or keyword-only: dataclasses.replace makes those).
_SHAPES: dict[type, tuple[Any, ...]] = {}


def _shape_of(cls: type) -> tuple[Any, ...]:
    fs = fields(cls)
    if any(not f.init or f.kw_only for f in fs):
        return ()
    return attrgetter(*(f.name for f in fs)), {f.name: i for i, f in enumerate(fs)}


@dataclass_transform(frozen_default=True)
def immutable(cls: type[_T]) -> type[_T]:
    """A slotted dataclass that the type checker holds frozen (no field is assigned after
    construction; a changed one is a copy). At run time it is a plain one: a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``, 3.7 us for the 50 fields of a
    ``CanonicalRequest`` (0.5 us plain), paid by every request and every ``replace``."""
    return dataclass(slots=True)(cls)


@dataclass(slots=True)
class Constraint:
    """One structured-output constraint, whatever the dialect called it.

    ``grammar`` is GBNF text, ``lark`` is Lark text, ``json_schema`` a schema dict, ``json_object``
    any JSON object (value None), ``regex`` a pattern, ``choice`` a list of strings.
    """

    kind: ConstraintKind
    value: Any = None


@dataclass(slots=True)
class Mirostat:
    mode: int  # 1 or 2
    tau: float = 5.0  # target surprise
    eta: float = 0.1  # learning rate


@dataclass(slots=True)
class Dry:
    multiplier: float
    base: float = 1.75
    allowed_length: int = 2
    sequence_breakers: list[str] = field(default_factory=lambda: ["\n", ":", '"', "*"])


@dataclass(slots=True, frozen=True)
class Native:
    """The caller's request as it arrived, for a deployment that speaks the caller's API itself
    (the native lane: a Claude deployment forwards an Anthropic Messages body byte-identical, so
    ``system`` blocks and ``cache_control`` placement keep their prompt-cache hits; only what the
    gateway owns, such as the model name, is changed). Translating backends ignore it."""

    api: str  # the caller's API ("anthropic")
    # As received, decoded once (an 87 KB Claude Code body takes 97 us to decode). Read-only: a
    # lane's copy changes only its top level, and each change below it is a copy (copy-on-write).
    body: dict[str, Any]
    headers: dict[str, str]  # the API's own headers as sent (anthropic-version, anthropic-beta)
    # What a translating backend leaves out of the request (optional in the caller's API, such as
    # thinking or cache_control): named in x-switchyard-warning where the route translates.
    optional: tuple[str, ...] = ()


@immutable
class CanonicalRequest:
    """What the caller asked for, read from its dialect. Immutable: what the gateway decides while
    serving it lives on the request context (``switchyard.gateway.context``); a changed request is a copy."""

    kind: RequestKind
    model: str  # exactly as the caller named it; responses echo this name
    dialect: str  # the caller's dialect ("openai", "llamacpp", "mistralrs", "fireworks", "sgp", ...)
    prompt: list[Prompt] | None = None  # completions and embeddings' inputs: always a list
    messages: list[dict[str, Any]] | None = None  # chat
    stream: bool = False
    include_usage: bool | None = None  # stream_options.include_usage

    max_tokens: int | None = None  # UNLIMITED (-1) allowed
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    typical_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    mirostat: Mirostat | None = None
    dry: Dry | None = None
    logit_bias: dict[int, float] | None = None
    seed: int | None = None
    ignore_eos: bool | None = None

    stop: list[str] | None = None
    include_stop_str_in_output: bool | None = None
    n: int | None = None
    best_of: int | None = None
    logprobs: int | None = None  # how many top alternatives per token; 0 = only the chosen token
    echo: bool | None = None
    suffix: str | None = None
    constraint: Constraint | None = None
    overflow: OverflowPolicy | None = None
    cache_prompt: bool | None = None

    images: list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None  # False: at most one tool call per answer
    user: str | None = None
    dimensions: int | None = None  # embeddings: the vector length asked for
    encoding_format: Literal["float", "base64"] | None = None  # embeddings: how vectors are written
    timeout: float | None = None  # seconds (inference_timeout)
    extra_params: dict[str, Any] | None = None  # SGP inference_extra_params: merged into the upstream body
    extra_headers: dict[str, str] | None = None  # SGP inference_extra_headers
    # Fields the caller's dialect table does not know. Forwarded only to an upstream that speaks
    # the caller's own dialect (vendor extensions); otherwise dropped and named in a warning header.
    extra: dict[str, Any] = field(default_factory=dict)
    # The caller's own name for a field read from several (mirostat_lr for ``mirostat``,
    # guided_regex for ``constraint``, n_predict for ``max_tokens``): errors name what was sent.
    named: dict[str, str] | None = None
    native: Native | None = None  # the caller's own body, for a deployment that speaks its API
    # What the caller's API repeats in its answer as the caller sent it (Responses: instructions,
    # tools, metadata, ...): the renderer's alone, no backend reads it.
    as_sent: dict[str, Any] | None = None
    # What the caller's dialect read but no backend here runs (Responses' hosted tools, encrypted
    # reasoning), each a phrase naming it: said in x-switchyard-warning.
    left_out: tuple[str, ...] = ()
    # The caller asked to see the model's reasoning (Anthropic ``thinking``, a Responses
    # ``reasoning.summary``): its renderer shows ``Chunk.reasoning`` only then.
    show_reasoning: bool = False
    # How many tokens the caller lets the model reason with (Anthropic ``thinking.budget_tokens``):
    # sent where the backend takes a budget (Gemini's thinkingBudget, Claude on Bedrock Converse).
    reasoning_budget: int | None = None
    # OpenAI's reasoning controls (chat ``reasoning_effort`` and ``verbosity``, Responses'
    # ``reasoning.effort`` and ``text.verbosity``): sent as such where the upstream takes them, the
    # effort as a thinking budget where it takes a budget (switchyard.dialects.reasoning).
    reasoning_effort: str | None = None
    verbosity: str | None = None

    def said(self) -> dict[str, Any]:
        """The sampling/output fields the caller set (not None), for renderers and logs."""
        return {name: v for name, v in zip(_SAMPLING_FIELDS, _sampling(self), strict=True) if v is not None}

    @property
    def choices_per_prompt(self) -> int:
        return self.n or 1


_ENVELOPE = frozenset({"kind", "model", "dialect", "prompt", "messages", "stream", "extra", "named",
                       "native", "as_sent", "left_out", "show_reasoning", "reasoning_budget",
                       "reasoning_effort", "verbosity"})
_SAMPLING_FIELDS = tuple(f.name for f in fields(CanonicalRequest) if f.name not in _ENVELOPE)
_sampling = attrgetter(*_SAMPLING_FIELDS)  # every field in one C call: said() runs per request


@dataclass(slots=True)
class TopLogprob:
    token: str
    logprob: float


@dataclass(slots=True)
class TokenLogprob:
    token: str
    logprob: float | None  # None: the first prompt token (echo), which nothing predicts
    top: list[TopLogprob] = field(default_factory=list)
    bytes: list[int] | None = None


@dataclass(slots=True)
class Usage:
    """OpenAI's meaning: ``prompt_tokens`` counts every prompt token, cached ones included
    (``cached_tokens`` read from a cache, ``cache_write_tokens`` written to one), and
    ``completion_tokens`` counts reasoning tokens too (``reasoning_tokens`` of them)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __iadd__(self, other: Usage) -> Usage:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_tokens += other.cached_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.reasoning_tokens += other.reasoning_tokens
        return self


class Chunk(msgspec.Struct):
    """A piece of one choice's output. Backends yield these; the gateway renders them.

    A non-streaming upstream answer becomes one chunk per choice carrying the whole text. ``usage``,
    when a backend knows it, rides on the last chunk (with ``index`` of any choice). ``tokens`` is
    how many completion tokens this chunk adds, when the backend knows (for exact accounting of
    streams that are cut off).

    A msgspec Struct, not a dataclass: a stream makes one per text delta, and a Struct's
    ``__init__`` (in C) takes 0.28 us where a slotted dataclass's 14 assignments in Python took 0.57.
    """

    index: int = 0
    text: str = ""
    finish_reason: FinishReason | None = None
    logprobs: list[TokenLogprob] | None = None
    usage: Usage | None = None
    tokens: int | None = None
    role: str | None = None  # chat: first delta of a message
    tool_calls: list[dict[str, Any]] | None = None  # chat: tool call deltas, OpenAI shape
    # Engine extras for llama.cpp's native shape and echo: the prompt's own logprobs/text.
    prompt_logprobs: list[TokenLogprob] | None = None
    stop_word: str | None = None  # the stop sequence that ended this choice, if one did
    # More chunks have already arrived and follow at once: the gateway may write them to the
    # caller together (one send instead of many when an upstream delivers a burst).
    more: bool = False
    # The native lane's reasoning, in the caller's API (Anthropic): whole ``thinking`` /
    # ``redacted_thinking`` blocks, signatures included, or in a stream a block's start and its
    # ``thinking_delta`` / ``signature_delta`` pieces. A caller must send them back as they came.
    thinking: list[dict[str, Any]] | None = None
    embeddings: list[list[float]] | None = None  # embeddings: one vector per input, in input order
    # Reasoning a backend writes as plain text beside the answer (an OpenAI-family upstream's
    # ``reasoning_content``, Gemini's thought parts): shown only to callers who asked for it.
    reasoning: str = ""
    # (The engine pickles every streamed chunk to the gateway: a Struct pickles by position,
    # 1.8 us and 1.3 to load, where a slotted dataclass by its own __reduce__ took 3.2 and 2.0.)


# A chunk's fields by position, in their order here (``Chunk(*row)`` rebuilds it): how the
# response cache keeps one (msgspec pickles one by the same order for the engine).
chunk_row = attrgetter(*Chunk.__struct_fields__)


@dataclass(slots=True)
class Completion:
    """A whole answer, aggregated from chunks, for non-streaming callers."""

    choices: list[Choice]
    usage: Usage


@dataclass(slots=True)
class Choice:
    index: int
    text: str = ""
    finish_reason: FinishReason | None = None
    logprobs: list[TokenLogprob] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    prompt_logprobs: list[TokenLogprob] | None = None
    stop_word: str | None = None
    thinking: list[dict[str, Any]] | None = None  # the native lane's thinking blocks, whole
    reasoning: str = ""  # the backend's plain-text reasoning (Chunk.reasoning), whole
    embeddings: list[list[float]] | None = None
