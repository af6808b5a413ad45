"""Vertex AI's credential: an OAuth2 bearer token for scope ``cloud-platform``, from a
service-account JSON file (google-auth signs a JWT and trades it at the file's ``token_uri``) or
Google's application default credentials (environment, gcloud, the GKE/GCE metadata server).

google-auth is the optional ``vertex`` extra, imported only when a Vertex deployment is built.
Its token fetch is blocking, so it runs off the event loop: a ``Refresher`` task started with the
backend fetches the token on a worker thread and again five minutes before it expires; ``sign``
only reads the token it holds (providers/credentials.py).
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from switchyard.core.canonical import RequestKind
from switchyard.core.deployments import DeploymentConfig
from switchyard.core.errors import install_hint
from switchyard.core.settings import ConfigError
from switchyard.providers.credentials import Refresher
from switchyard.providers.google.embed import vertex_style, with_embeddings
from switchyard.providers.google.gemini import GEMINI_ROW, GeminiCodec, gemini_paths
from switchyard.providers.wire import Wire

SCOPE = "https://www.googleapis.com/auth/cloud-platform"
EARLY = 300.0  # refresh this many seconds before expiry
OWNED = frozenset({"authorization", "x-goog-api-key", "x-goog-user-project"})
VERTEX = GeminiCodec("vertex")
CLAUDE_VERSION = "vertex-2023-10-16"  # the anthropic_version Vertex documents for rawPredict


class GoogleAuth:
    """An ``Auth`` whose one header (``Authorization: Bearer <token>``) is added per request, from
    the token its ``refresher`` holds."""

    owned = OWNED
    signs = True

    def __init__(self, deployment: str, credentials: Any, request: Callable[[], Any],
                 clock: Callable[[], float] = time.time) -> None:
        self.fixed: dict[str, str] = {}
        self._creds = credentials
        self._request = request  # a google.auth.transport Request factory
        self._clock = clock
        self.refresher: Refresher[str] = Refresher(deployment, "a Google OAuth token", self._fetch,
                                                   early=EARLY, clock=clock)

    def sign(self, method: str, target: str, host: str, body: bytes) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.refresher.value}")]

    def _fetch(self) -> tuple[str, float]:
        """On a worker thread: google-auth's blocking refresh."""
        self._creds.refresh(self._request())
        expiry = getattr(self._creds, "expiry", None)
        # google-auth's expiry is a naive UTC datetime; without one, assume Google's hour
        expires = expiry.replace(tzinfo=datetime.UTC).timestamp() if expiry else self._clock() + 3600
        return self._creds.token, expires


def vertex_auth(dep: DeploymentConfig) -> GoogleAuth:
    try:
        import google.auth
        import google.auth.transport.requests
        from google.oauth2 import service_account
    except ImportError:
        raise ConfigError(
            f"deployment {dep.name}: a vertex deployment needs google-auth: {install_hint('vertex')}"
        ) from None
    path = dep.credentials
    if path:
        creds = service_account.Credentials.from_service_account_file(path, scopes=[SCOPE])
    else:
        creds, _ = google.auth.default(scopes=[SCOPE])
    return GoogleAuth(dep.name, creds, google.auth.transport.requests.Request)


# -- the row ---------------------------------------------------------------------------------------


def vertex_row(dep: DeploymentConfig) -> Wire:
    """The model decides the publisher: ``claude-*`` is Anthropic's (the Messages body in Vertex's
    rawPredict envelope: the model in the path, ``anthropic_version`` in the body; no embeddings),
    anything else Google's (generateContent; embeddings as ``embed.vertex_style`` says)."""
    project, location = quote(dep.project or "", safe=""), quote(dep.location or "global", safe="")
    base = f"/v1/projects/{project}/locations/{location}/publishers"
    if (dep.model or "").startswith("claude"):
        from switchyard.providers.anthropic import ROW as CLAUDE
        from switchyard.providers.anthropic.codec import AnthropicCodec

        codec = AnthropicCodec(model_field=False, envelope={"anthropic_version": CLAUDE_VERSION})
        claude_paths: dict[tuple[RequestKind, bool], str] = {
            (kind, stream): base
            + "/anthropic/models/{model}:"
            + ("streamRawPredict" if stream else "rawPredict")
            for kind in ("chat", "completion")
            for stream in (False, True)
        }
        return dataclasses.replace(
            CLAUDE, name="vertex", codec=codec, paths=claude_paths, auth=vertex_auth, headers={},
            count_path=base + "/anthropic/models/count-tokens:rawPredict",
        )
    google = base + "/google/models/{model}"
    row = dataclasses.replace(
        GEMINI_ROW, name="vertex", codec=VERTEX, paths=gemini_paths(google), auth=vertex_auth,
    )
    return with_embeddings(row, google, vertex_style(dep.model or ""))

