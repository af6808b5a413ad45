"""Bedrock Runtime's auth, for every Bedrock row (Converse, InvokeModel): SigV4 with static keys
or the AWS credential chain (botocore, the ``bedrock`` extra), or a Bedrock API key as Bearer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from switchyard.core.deployments import DeploymentConfig
from switchyard.core.errors import install_hint
from switchyard.core.settings import ConfigError
from switchyard.providers.aws.sigv4 import Credentials, SigV4
from switchyard.providers.credentials import Refresher

OWNED = frozenset({"authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"})


class SigV4Auth:
    """Per request: SigV4 over the host, the time and the exact body (service ``bedrock``)."""

    __slots__ = ("prefix", "refresher", "signer")
    owned = OWNED
    fixed: Mapping[str, str] = {}
    signs = True

    def __init__(self, signer: SigV4, prefix: str = "",
                 refresher: Refresher[Credentials] | None = None) -> None:
        self.signer = signer
        self.prefix = prefix  # the base URL's own path, sent before every target
        self.refresher = refresher  # the credential chain's (None: static keys)

    def sign(self, method: str, target: str, host: str, body: bytes) -> list[tuple[str, str]]:
        path, _, query = target.partition("?")
        return list(self.signer.sign(method, host, self.prefix + path, query, {}, body).items())


class BearerAuth:
    """A Bedrock API key (``AWS_BEARER_TOKEN_BEDROCK``'s kind): ``Authorization: Bearer K``."""

    __slots__ = ("fixed",)
    owned = OWNED
    signs = False
    refresher = None

    def __init__(self, key: str) -> None:
        self.fixed = {"authorization": f"Bearer {key}"}

    def sign(self, method: str, target: str, host: str, body: bytes) -> list[tuple[str, str]]:
        return []


def bedrock_auth(dep: DeploymentConfig, prefix: str = "") -> SigV4Auth | BearerAuth:
    """Static keys (SigV4), else an API key (Bearer), else the standard AWS credential chain
    (environment, shared profile, web identity, instance metadata) through botocore, which is
    imported only here (the ``bedrock`` extra)."""
    region = dep.region or ""
    access, secret = dep.aws_access_key_id, dep.aws_secret_access_key
    if access and secret:
        fixed = Credentials(access, secret, dep.aws_session_token)
        return SigV4Auth(SigV4("bedrock", region, lambda: fixed), prefix)
    if dep.api_key:
        return BearerAuth(dep.api_key)
    chain = chain_credentials(dep.name)
    return SigV4Auth(SigV4("bedrock", region, lambda: _held(chain)), prefix, chain)


def _held(chain: Refresher[Credentials]) -> Credentials:
    assert chain.value is not None, "the driver awaits refresher.ready() before it signs"
    return chain.value


class NoCredentials(Exception):
    """The AWS credential chain found nothing (its name is what the caller's error says)."""


def chain_credentials(deployment: str) -> Refresher[Credentials]:
    """The standard AWS credential chain, resolved and refreshed on a worker thread (IMDS, STS,
    SSO and credential_process are blocking I/O): botocore refreshes temporary credentials
    ahead of their expiry when asked, so the task asks every minute."""
    try:
        import botocore.session
    except ImportError:
        raise ConfigError(
            f"deployment {deployment}: Bedrock without aws_access_key_id/"
            f"aws_secret_access_key or api_key reads the AWS credential chain, which needs "
            f"botocore: {install_hint('bedrock')}"
        ) from None
    found: list[Any] = []

    def fetch() -> tuple[Credentials, None]:
        if not found:
            creds = botocore.session.Session().get_credentials()
            if creds is None:
                raise NoCredentials
            found.append(creds)
        f = found[0].get_frozen_credentials()
        return Credentials(f.access_key, f.secret_key, f.token), None

    return Refresher(deployment, "AWS credentials", fetch, poll=60.0)
