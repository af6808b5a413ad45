"""The seam between the router and whatever produces tokens."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol

from switchyard.core.canonical import CanonicalRequest, Chunk


class Backend(Protocol):
    """One deployment's way of turning a canonical request into canonical chunks.

    ``generate`` yields chunks as they come (a non-streaming upstream answer is one chunk per
    choice) and raises ``switchyard.core.errors.GatewayError`` subclasses, everything (refusals included)
    from inside the iterator. Each error declares what the router needs: ``retryable`` (another
    attempt may help; honoured only before any chunk was yielded), ``deployment_fault`` (counts
    against this deployment's health) and ``retry_after``. The router bounds the wait for the first
    chunk by the request's deadline; a backend may enforce ``req.timeout`` further itself.
    Closing the iterator early (``aclose``) must free the upstream stream or engine sequence.
    """

    def generate(self, req: CanonicalRequest,
                 upstream_model: str | None = None) -> AsyncGenerator[Chunk, None]:
        """``upstream_model``: the name to ask an upstream for (wildcard routes pass the caller's
        through); ``None`` means the deployment's configured one."""
        ...

    async def count_tokens(self, req: CanonicalRequest, *, exact: bool = False) -> int | None:
        """The prompt's exact token count with the model's own tokenizer, or None when this
        backend cannot count (the gateway then estimates; see ``switchyard.policies.tokens``).
        ``exact``: the count is the answer (count_tokens), worth an upstream round trip."""
        ...

    def stats(self) -> dict[str, float]:
        """Gauges for ``/metrics``, read at scrape time: the engine reports ``queue_depth``,
        ``batch_size``, ``tokens_per_second`` and ``kv_cache_usage`` (0..1); upstreams nothing."""
        ...

    async def start(self) -> None:
        """Open pools / load models. May run in the background; see ``ready``."""

    @property
    def ready(self) -> bool: ...

    @property
    def load_error(self) -> str | None:
        """Why a backend that loads in the background (the engine) failed to; None otherwise."""
        ...

    async def reported_window(self, upstream_model: str | None = None) -> int | None:
        """The context window the upstream reports (vLLM's ``/v1/models``), asked only of a
        deployment whose row says ``Caps.reports_window``; None when it cannot say."""
        ...

    async def aclose(self) -> None: ...
