"""The built-in provider rows. The OpenAI-family servers differ only in paths, auth and
capabilities; Azure is data (a deployments path, a query and its own key header); Mistral and
Cohere are their OpenAI-compatible APIs with their capabilities (Cohere's Embed models: its own
API, cohere.py). The providers with a codec of their own bring their rows from where they are
written. ``ROWS`` is the composition root: every provider name the gateway serves, one literal map
(tests/providers/test_rows.py ties it to core/deployments.py's provider tables)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from switchyard.core.canonical import RequestKind
from switchyard.core.deployments import DeploymentConfig
from switchyard.core.settings import ConfigError
from switchyard.dialects.chat import chat_emits
from switchyard.dialects.registry import DIALECTS
from switchyard.dialects.spec import Dialect
from switchyard.providers.anthropic import ROW as ANTHROPIC_ROW
from switchyard.providers.aws.converse import bedrock_row
from switchyard.providers.cohere import cohere_row
from switchyard.providers.google.gemini import GEMINI_ROW
from switchyard.providers.google.vertex import vertex_row
from switchyard.providers.openai.codec import OpenAICodec
from switchyard.providers.wire import BEARER, Auth, Caps, Wire, header_auth, paths

OPENAI_PATHS = paths("/chat/completions", "/completions", "/embeddings")


def _caps(d: Dialect, **kw: bool) -> Caps:
    """What the dialect table can write decides n and best_of; the rest is the row's."""
    return Caps(n="n" in d.emits, chat_n="n" in chat_emits(d), best_of="best_of" in d.emits, **kw)


def _row(name: str, dialect: Dialect, caps: Caps,
         where: Mapping[tuple[RequestKind, bool], str] = OPENAI_PATHS,
         auth: Callable[[DeploymentConfig], Auth] = BEARER) -> Wire:
    # OpenAI-family servers may report their window (vLLM); a dialect with an overflow field
    # (Fireworks, mistral.rs) applies the caller's policy itself.
    # A completions endpoint whose dialect writes echo carries it; a chat-only row has it emulated.
    caps = dataclasses.replace(caps, reports_window=True, applies_overflow="overflow" in dialect.emits,
                               echo="echo" in dialect.emits and ("completion", False) in where)
    return Wire(name, OpenAICodec(dialect, caps), where, auth=auth, caps=caps)


_D = DIALECTS
# OpenAI and Azure (v1, and classic api-versions since the bound was renamed) take
# max_completion_tokens and the reasoning controls.
_OPENAI_CAPS = _caps(_D["openai"], stream_usage=True, overflow_is_error=True, reasoning_controls=True,
                     completion_tokens_bound=True)

# Scale GenAI Platform: /beta paths, its key in x-api-key, one string prompt per call.
_SGP = _row("sgp", _D["sgp"], _caps(_D["sgp"], prompts=False),
            paths("/beta/chat/completions", "/beta/completions"), header_auth("x-api-key"))

# Mistral: OpenAI's body but the seed is random_seed; it refuses stream_options (usage comes
# in the last event anyway).
_MISTRAL_D = dataclasses.replace(_D["openai"], emits={**_D["openai"].emits,
                                                    "seed": lambda v: {"random_seed": v}})
# Chat-only rows: completion bodies go as one user message each (prompts fanned out).
_MISTRAL = _row("mistral", _MISTRAL_D, _caps(_MISTRAL_D, prompts=False),
                paths("/chat/completions", embedding="/embeddings"))
# Cohere's compatibility API for chat (no stream_options, no n); a deployment of an Embed model
# gets Cohere's own /v2/embed (providers/cohere.py).
_COHERE = cohere_row(_row("cohere", _D["openai"], Caps(n=False, chat_n=False, best_of=False, prompts=False),
                          paths("/chat/completions")))


# Azure OpenAI: the classic API with api_version (the deployment name in the path, its key in
# api-key), else the v1 API at /openai/v1/ where the body's model is the deployment name.
_AZURE_AUTH = header_auth("api-key")
_AZURE_V1 = _row("azure", _D["openai"], _OPENAI_CAPS,
                 paths("/openai/v1/chat/completions", "/openai/v1/completions", "/openai/v1/embeddings"),
                 _AZURE_AUTH)


_AZURE_BOUND_SINCE = "2024-09-01-preview"  # api-versions before it know max_tokens only
_AZURE_OLD = _row("azure", _D["openai"], dataclasses.replace(_OPENAI_CAPS, completion_tokens_bound=False),
                  _AZURE_V1.paths, _AZURE_AUTH)


def _azure(dep: DeploymentConfig) -> Wire:
    if dep.api_version is None:
        return _AZURE_V1
    old = dep.api_version < _AZURE_BOUND_SINCE
    return dataclasses.replace(
        _AZURE_OLD if old else _AZURE_V1, paths=paths("/openai/deployments/{model}/chat/completions",
                               "/openai/deployments/{model}/completions",
                               "/openai/deployments/{model}/embeddings"),
        query={"api-version": dep.api_version})


Row = Wire | Callable[[DeploymentConfig], Wire]  # a fixed row, or a function of the deployment

ROWS: Mapping[str, Row] = {
    "openai": _row("openai", _D["openai"], _OPENAI_CAPS),
    "vllm": _row("vllm", _D["vllm"], _caps(_D["vllm"], stream_usage=True, overflow_is_error=True)),
    "llamacpp": _row("llamacpp", _D["llamacpp"], _caps(_D["llamacpp"], stream_usage=True)),
    "mistralrs": _row("mistralrs", _D["mistralrs"], _caps(_D["mistralrs"], stream_usage=True)),
    "fireworks": _row("fireworks", _D["fireworks"], _caps(_D["fireworks"])),  # usage comes unasked
    "sgp": _SGP,
    "azure": _azure,
    "mistral": _MISTRAL,
    "cohere": _COHERE,
    "anthropic": ANTHROPIC_ROW,
    "gemini": GEMINI_ROW,
    "vertex": vertex_row,
    "bedrock": bedrock_row,
}


def wire_for(dep: DeploymentConfig) -> Wire:
    """The row of the deployment's provider (``provider:``, or ``dialect:`` as its synonym)."""
    row = ROWS.get(dep.provider)
    if row is None:
        raise ConfigError(f"deployment {dep.name}: provider {dep.provider!r} has no wire row in this build "
                          f"(available: {', '.join(sorted(ROWS))})")
    return row if isinstance(row, Wire) else row(dep)
