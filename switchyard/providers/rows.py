"""The built-in provider rows. The OpenAI-family servers differ only in paths, auth and
capabilities; Azure is data (a deployments path, a query and its own key header); Mistral and
Cohere are their OpenAI-compatible APIs with their capabilities (Cohere's Embed models: its own
API, cohere.py). Providers with a codec of
their own register from their package (anthropic/ here; bedrock, gemini and vertex the same way)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from switchyard.core.canonical import RequestKind
from switchyard.core.deployments import DeploymentConfig
from switchyard.dialects.chat import chat_emits
from switchyard.dialects.registry import DIALECTS
from switchyard.dialects.spec import Dialect
from switchyard.providers.cohere import cohere_row
from switchyard.providers.openai import OpenAICodec
from switchyard.providers.wire import BEARER, Auth, Caps, Wire, header_auth, paths, register

OPENAI_PATHS = paths("/chat/completions", "/completions", "/embeddings")


def _caps(d: Dialect, **kw: bool) -> Caps:
    """What the dialect table can write decides n and best_of; the rest is the row's."""
    return Caps(n="n" in d.emits, chat_n="n" in chat_emits(d), best_of="best_of" in d.emits, **kw)


def _row(name: str, dialect: Dialect, caps: Caps,
         where: Mapping[tuple[RequestKind, bool], str] = OPENAI_PATHS,
         auth: Callable[[DeploymentConfig], Auth] = BEARER) -> Wire:
    return Wire(name, OpenAICodec(dialect, caps), where, auth=auth, caps=caps, native_dialect=dialect.name)


_D = DIALECTS
for _name, _caps_kw in {
    "openai": {"stream_usage": True, "overflow_is_error": True, "reasoning_controls": True,
               "completion_tokens_bound": True},
    "vllm": {"stream_usage": True, "overflow_is_error": True},
    "llamacpp": {"stream_usage": True},
    "mistralrs": {"stream_usage": True},
    "fireworks": {},  # usage comes in the last event unasked
}.items():
    register(_name, _row(_name, _D[_name], _caps(_D[_name], **_caps_kw)))

# Scale GenAI Platform: /beta paths, its key in x-api-key, one string prompt per call.
register("sgp", _row("sgp", _D["sgp"], _caps(_D["sgp"], prompts=False),
                     paths("/beta/chat/completions", "/beta/completions"), header_auth("x-api-key")))

# Mistral: OpenAI's body but the seed is random_seed; it refuses stream_options (usage comes
# in the last event anyway).
_MISTRAL = dataclasses.replace(_D["openai"], emits={**_D["openai"].emits,
                                                  "seed": lambda v: {"random_seed": v}})
# Chat-only rows: completion bodies go as one user message each (prompts fanned out).
register("mistral", _row("mistral", _MISTRAL, _caps(_MISTRAL, prompts=False),
                         paths("/chat/completions", embedding="/embeddings")))
# Cohere's compatibility API for chat (no stream_options, no n); a deployment of an Embed model
# gets Cohere's own /v2/embed (providers/cohere.py).
register("cohere", cohere_row(_row("cohere", _D["openai"],
                                   Caps(n=False, chat_n=False, best_of=False, prompts=False),
                                   paths("/chat/completions"))))


# Azure OpenAI: the classic API with api_version (the deployment name in the path, its key in
# api-key), else the v1 API at /openai/v1/ where the body's model is the deployment name.
_AZURE_AUTH = header_auth("api-key")
_AZURE_CAPS = _caps(_D["openai"], stream_usage=True, overflow_is_error=True, reasoning_controls=True,
                    completion_tokens_bound=True)
_AZURE_V1 = _row("azure", _D["openai"], _AZURE_CAPS,
                 paths("/openai/v1/chat/completions", "/openai/v1/completions", "/openai/v1/embeddings"),
                 _AZURE_AUTH)


_AZURE_BOUND_SINCE = "2024-09-01-preview"  # api-versions before it know max_tokens only
_AZURE_OLD = _row("azure", _D["openai"], dataclasses.replace(_AZURE_CAPS, completion_tokens_bound=False),
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


register("azure", _azure)

# Providers with a codec of their own register their rows where they are written.
from switchyard.providers import anthropic as _anthropic  # noqa: E402,F401
from switchyard.providers import bedrock as _bedrock  # noqa: E402,F401
from switchyard.providers import gemini as _gemini  # noqa: E402,F401
from switchyard.providers import vertex as _vertex  # noqa: E402,F401
