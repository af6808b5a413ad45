"""Bedrock Runtime's auth, for every Bedrock row (Converse, InvokeModel): SigV4 with static keys
or the AWS credential chain (botocore, the ``bedrock`` extra), or a Bedrock API key as Bearer."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from switchyard.core.deployments import DeploymentConfig
from switchyard.core.errors import install_hint
from switchyard.core.settings import ConfigError
from switchyard.providers.aws.sigv4 import Credentials, SigV4

OWNED = frozenset({"authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"})


class SigV4Auth:
    """Per request: SigV4 over the host, the time and the exact body (service ``bedrock``)."""

    __slots__ = ("prefix", "signer")
    owned = OWNED
    fixed: Mapping[str, str] = {}
    signs = True

    def __init__(self, signer: SigV4, prefix: str = "") -> None:
        self.signer = signer
        self.prefix = prefix  # the base URL's own path, sent before every target

    def sign(self, method: str, target: str, host: str, body: bytes) -> list[tuple[str, str]]:
        path, _, query = target.partition("?")
        return list(self.signer.sign(method, host, self.prefix + path, query, {}, body).items())


class BearerAuth:
    """A Bedrock API key (``AWS_BEARER_TOKEN_BEDROCK``'s kind): ``Authorization: Bearer K``."""

    __slots__ = ("fixed",)
    owned = OWNED
    signs = False

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
    return SigV4Auth(SigV4("bedrock", region, chain_credentials(dep.name)), prefix)


def chain_credentials(deployment: str) -> Callable[[], Credentials]:
    try:
        import botocore.session
    except ImportError:
        raise ConfigError(
            f"deployment {deployment}: Bedrock without aws_access_key_id/"
            f"aws_secret_access_key or api_key reads the AWS credential chain, which needs "
            f"botocore: {install_hint('bedrock')}"
        ) from None
    found = botocore.session.Session().get_credentials()
    if found is None:
        raise ConfigError(
            f"deployment {deployment}: no AWS credentials found (set aws_access_key_id and "
            "aws_secret_access_key, api_key, or the standard AWS environment/profile)"
        )

    def current() -> Credentials:
        f = found.get_frozen_credentials()  # refreshes temporary credentials before they expire
        return Credentials(f.access_key, f.secret_key, f.token)

    return current
