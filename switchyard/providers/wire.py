"""A provider as a value: what differs between upstream APIs, as data plus two small protocols.

``UpstreamBackend._run`` (provider.py) is the one driver for every provider: it renders the body
with the row's ``Codec``, adds the row's ``Auth`` headers, sends it over the pooled ``Exchange`` to
the row's path, and reads the answer (whole, or streamed through the row's ``framing``) back into
canonical chunks with the same ``Codec``. A new provider is a ``Wire`` row named in rows.py's ``ROWS``
(the composition root), plus a codec when its API is not OpenAI-shaped, plus an auth when its credential
is not one static header.

The two protocols, for whoever writes a codec or an auth:

``Auth`` (one per deployment, built by ``Wire.auth(deployment)``)
    ``owned``: lower-case header names the gateway sets; a caller may never send them.
    ``fixed``: headers baked once into every request (``x-api-key: K``).
    ``signs``: whether ``sign`` must be called; ``sign(method, target, host, body)`` returns the
    per-request headers (SigV4 over the exact body and time); ``[]`` unless signing. ``sign``
    never does I/O: a credential that must be fetched (an OAuth token, the AWS credential chain)
    is kept fresh by the auth's ``refresher`` (providers/credentials.py; None for a static key),
    a task the driver starts with the backend and awaits (``ready``) before it signs.

``Codec`` (stateless, shared by every deployment of its API)
    ``render(req, model, dep) -> (body, Emulation)``: the upstream body from the canonical request;
    anything the API cannot carry is emulated (``Emulation``) or refused with ``InvalidRequest``
    naming the caller's own field (``switchyard.dialects.registry.caller_param``).
    ``whole(raw, req) -> list[Chunk]``: a whole (non-streamed) 200 answer.
    ``stream(req) -> StreamDecoder``: a fresh decoder per streamed answer; ``feed(name, data)`` takes
    one event (``name``: the SSE ``event:`` field or the frame's event type, None when absent) and
    returns its chunks; ``done`` turns true at the stream's own end marker; ``ending()`` at the
    end of the body says what is wrong with how it ended (None: a clean end).
    A codec reports an unusable answer by raising ``WireError`` (the driver words it with the
    deployment's name and scrubs any upstream text); ``retryable=True`` only when nothing of the
    answer can have reached the caller (an in-band overload before any content).

The optional lanes are declared by the codec (``Codec.lanes``, ``Lanes``), never probed; the
row copies them from its codec when it is built, so a row given another codec
(``dataclasses.replace(row, codec=...)``) has that codec's lanes, never the old one's:
    ``Wire.native_dialect``: the caller dialect whose bodies the codec writes (its native lane's).
    ``Wire.native`` (``NativeLane``): when the caller spoke this API itself (``Wire.native_dialect``),
    the caller's body is kept as sent except the fields the gateway owns; the row's
    ``native_headers`` go as the caller sent them.
    ``Wire.carries(model) -> frozenset[str]``: what the caller's API makes optional that this row
    sends for ``model`` (``thinking.budget_tokens``); the rest is named as left out.
    ``Wire.count`` (``CountLane``): the upstream's own token count on the native lane: the body
    from the caller's count request and the count read from the answer, sent to the row's
    ``count_path`` (``{model}`` filled as in ``paths``; none: no count).
    ``Wire.cache_breakpoints(body) -> bool``: ``prompt_cache: auto``'s placement of prompt-cache
    breakpoints on the codec's bodies (Messages bodies; True when it placed any).
    ``Caps.reports_window``: the upstream may report its context window (vLLM's ``/v1/models``);
    ``Caps.applies_overflow``: it applies the caller's overflow policy itself (a body field).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from switchyard.core.canonical import CanonicalRequest, Chunk, RequestKind
from switchyard.core.deployments import DeploymentConfig
from switchyard.core.errors import RETRY_STATUSES
from switchyard.providers.credentials import Refresher
from switchyard.providers.emulation import Emulation

# A generator, so that the reader closes it where it stops early (see provider._stream).
Frames = Callable[[AsyncIterator[bytes]], AsyncGenerator[list[tuple[bytes | None, bytes]], None]]
SSE = "text/event-stream"


@dataclass(frozen=True, slots=True)
class Caps:
    """What an upstream carries: the router fans out what it cannot (``n``, ``best_of``, several
    prompts, more embedding inputs than one call takes); the codec asks for usage on streams
    only where the upstream takes the option."""

    n: bool = True  # completions
    chat_n: bool = True
    best_of: bool = True
    prompts: bool = True  # several prompts in one call
    stream_usage: bool = False  # takes stream_options.include_usage
    overflow_is_error: bool = False  # its own answer to an overflowing request is the error
    embed_inputs: int | None = None  # embeddings: the most inputs one call takes (None: any)
    echo: bool = False  # legacy completions' echo sent on (else the driver emulates it)
    reports_window: bool = False  # its server may report the model's window (GET /models)
    applies_overflow: bool = False  # takes the overflow policy itself (Fireworks, mistral.rs)
    # chat's bound goes as max_completion_tokens (OpenAI's and Azure's: their reasoning models
    # refuse max_tokens), not max_tokens (what the other servers read)
    completion_tokens_bound: bool = False
    reasoning_controls: bool = False  # takes reasoning_effort and verbosity (dialects/reasoning.py)


class WireError(Exception):
    """An answer that is not a usable success, in the codec's words (``what``: "sent ...";
    ``said``: the upstream's own text, scrubbed by the driver before it is shown)."""

    def __init__(self, what: str, said: str | None = None, *, retryable: bool = False,
                 status: int = 502) -> None:
        super().__init__(what)
        self.what, self.said, self.retryable, self.status = what, said, retryable, status


class Auth(Protocol):
    @property
    def owned(self) -> frozenset[str]: ...
    @property
    def fixed(self) -> Mapping[str, str]: ...
    @property
    def signs(self) -> bool: ...
    @property
    def refresher(self) -> Refresher[Any] | None: ...

    def sign(self, method: str, target: str, host: str, body: bytes) -> list[tuple[str, str]]: ...


class StreamDecoder(Protocol):
    @property
    def done(self) -> bool: ...

    def feed(self, name: bytes | None, data: bytes) -> list[Chunk]: ...

    def ending(self) -> str | None: ...


class NativeLane(Protocol):
    """The caller's own body, kept but for what the gateway owns (its unknown fields pass only
    where ``allow_params`` allows)."""

    def __call__(self, body: dict[str, Any], req: CanonicalRequest, model: str,
                 allow_params: list[str] | None) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class CountLane:
    """The upstream's own prompt token count: ``body(caller's body, model, allow_params)``;
    ``read(answer) -> count`` (None: the estimate stands in)."""

    body: Callable[[dict[str, Any], str, list[str] | None], dict[str, Any]]
    read: Callable[[bytes], int | None]


@dataclass(frozen=True, slots=True)
class Lanes:
    """What a codec offers beyond render/whole/stream (None: its API has none)."""

    native_dialect: str | None = None  # the caller dialect whose bodies it writes
    native: NativeLane | None = None  # the caller's own body, kept (with native_dialect)
    carries: Callable[[str], frozenset[str]] | None = None  # optional fields it sends, per model
    count: CountLane | None = None  # the upstream's own prompt token count (native lane only)
    cache_breakpoints: Callable[[dict[str, Any]], bool] | None = None  # prompt_cache: auto's


NO_LANES = Lanes()


class Codec(Protocol):
    def render(self, req: CanonicalRequest, model: str,
               dep: DeploymentConfig) -> tuple[dict[str, Any], Emulation]: ...

    def whole(self, raw: bytes, req: CanonicalRequest) -> list[Chunk]: ...

    def stream(self, req: CanonicalRequest) -> StreamDecoder: ...

    @property
    def lanes(self) -> Lanes: ...


@dataclass(frozen=True, slots=True)
class HeaderAuth:
    """A static credential in one header: ``Authorization: Bearer K``, ``x-api-key: K``, ``api-key: K``."""

    fixed: Mapping[str, str]
    owned: frozenset[str]
    signs: bool = False
    refresher: None = None

    def sign(self, method: str, target: str, host: str, body: bytes) -> list[tuple[str, str]]:
        return []


def header_auth(name: str, prefix: str = "",
                also_owned: tuple[str, ...] = ()) -> Callable[[DeploymentConfig], Auth]:
    """An ``Auth`` factory: the deployment's api_key in header ``name`` (none without a key). The
    other credential headers stay owned so a caller cannot add a second credential."""
    owned = frozenset({name, "authorization", *also_owned})

    def make(dep: DeploymentConfig) -> Auth:
        return HeaderAuth({name: prefix + dep.api_key} if dep.api_key else {}, owned)
    return make


BEARER = header_auth("authorization", "Bearer ")


@dataclass(frozen=True, slots=True)
class Wire:
    """One upstream API. ``paths``: (kind, stream) -> path below base_url, ``{model}`` filled with
    the percent-encoded upstream model; ``query``: added to every path."""

    name: str
    codec: Codec
    paths: Mapping[tuple[RequestKind, bool], str]
    query: Mapping[str, str] = field(default_factory=dict)
    auth: Callable[[DeploymentConfig], Auth] = BEARER
    headers: Mapping[str, str] = field(default_factory=dict)  # fixed, e.g. anthropic-version
    framing: Frames | None = None  # None: server-sent events (sse.sse_batches)
    stream_type: str = SSE  # the content type a streamed answer must have
    retry_statuses: frozenset[int] = RETRY_STATUSES
    caps: Caps = Caps()
    # Sent per request: the deployment's value, or on the native lane the caller's (anthropic-version).
    native_headers: frozenset[str] = frozenset()
    count_path: str | None = None  # where the codec's count lane is asked (None: not here)
    # The URL the paths sit below, from the deployment's base_url (None: that URL itself).
    base: Callable[[str], str] | None = None
    # A whole answer's prompt tokens, when its body reports none (Bedrock InvokeModel's header).
    tokens_header: str | None = None
    # The codec's lanes (Lanes), never given: set from the codec whenever a row is built or
    # replaced, so they cannot outlive the codec they came from.
    native_dialect: str | None = field(init=False)
    native: NativeLane | None = field(init=False)
    carries: Callable[[str], frozenset[str]] | None = field(init=False)
    count: CountLane | None = field(init=False)
    cache_breakpoints: Callable[[dict[str, Any]], bool] | None = field(init=False)

    def __post_init__(self) -> None:
        lanes = self.codec.lanes
        object.__setattr__(self, "native_dialect", lanes.native_dialect)
        object.__setattr__(self, "native", lanes.native)
        object.__setattr__(self, "carries", lanes.carries)
        object.__setattr__(self, "count", lanes.count if self.count_path is not None else None)
        object.__setattr__(self, "cache_breakpoints", lanes.cache_breakpoints)

    def count_target(self, model: str) -> str | None:
        if self.count is None or self.count_path is None:
            return None
        return self.count_path.replace("{model}", quote(model, safe=""))

    def target(self, kind: RequestKind, stream: bool, model: str) -> str:
        path = self.paths[(kind, stream)]
        if "{model}" in path:
            path = path.replace("{model}", quote(model, safe=""))
        return f"{path}?{urlencode(self.query)}" if self.query else path


def paths(chat: str | None, completion: str | None = None,
          embedding: str | None = None) -> dict[tuple[RequestKind, bool], str]:
    """The same path streamed or not (the body says which); embeddings never stream."""
    out: dict[tuple[RequestKind, bool], str] = {}
    if chat is not None:
        out[("chat", False)] = out[("chat", True)] = chat
    if completion is not None:
        out[("completion", False)] = out[("completion", True)] = completion
    if embedding is not None:
        out[("embedding", False)] = embedding
    return out
