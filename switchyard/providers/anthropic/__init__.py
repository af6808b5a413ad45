"""Claude through Anthropic's Messages API: the codec (request.py writes the body, answers.py reads
answers and the named-event stream) and its row. Its facts are the one Anthropic table,
switchyard/dialects/anthropic/wire.py."""

from __future__ import annotations

from switchyard.core.deployments import DeploymentConfig
from switchyard.core.errors import RETRY_STATUSES
from switchyard.dialects.anthropic.wire import DEFAULT_VERSION
from switchyard.providers.anthropic.codec import AnthropicCodec
from switchyard.providers.wire import Caps, HeaderAuth, Wire, paths

CODEC = AnthropicCodec()
_OWNED = frozenset({"x-api-key", "authorization", "anthropic-version"})


def _auth(dep: DeploymentConfig) -> HeaderAuth:
    fixed = {"anthropic-version": dep.api_version or DEFAULT_VERSION}
    if dep.api_key:
        fixed["x-api-key"] = dep.api_key
    return HeaderAuth(fixed, _OWNED)


# Chat only; a legacy completion body becomes one user message (prompts fan out one per call).
ROW = Wire("anthropic", CODEC, paths("/v1/messages", "/v1/messages"), auth=_auth,
           retry_statuses=RETRY_STATUSES | {529},
           caps=Caps(n=False, chat_n=False, best_of=False, prompts=False),
           native_headers=frozenset({"anthropic-version", "anthropic-beta"}),
           count_path="/v1/messages/count_tokens")


__all__ = ["CODEC", "ROW", "AnthropicCodec"]
