"""A real OpenID provider for the tests: the ``oidc-provider`` npm package (pinned in the
Makefile, installed in the per-user npm cache, tests/clients/cli.py) run by node on loopback
(``tests/fakes/oidc_provider.mjs``), signing with RSA keys this module makes, so that a test can
also sign tokens it forges or bends (expired, wrong audience) with the provider's own key."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from tests.clients.cli import OIDC_PROVIDER
from tests.conftest import free_port

MAIN = OIDC_PROVIDER / "lib/index.js"
SCRIPT = Path(__file__).with_name("oidc_provider.mjs")
CLIENT_ID, CLIENT_SECRET = "switchyard-console", "sy-test-client-secret"

# Users whose groups map to each role (tests/http/test_sso.py's config maps them).
USERS: dict[str, dict[str, Any]] = {
    "ada": {"email": "ada@example.com", "name": "Ada Admin", "groups": ["platform-admins"]},
    "tom": {"email": "tom@example.com", "name": "Tom Lead", "groups": ["alpha-leads"]},
    "mia": {"email": "mia@example.com", "name": "Mia Member", "groups": ["alpha-devs"]},
    "vic": {"email": "vic@example.com", "name": "Vic Viewer", "groups": ["auditors"]},
    "nob": {"email": "nob@example.com", "name": "No Body", "groups": ["nothing"]},
}


@dataclass
class Key:
    kid: str
    private: rsa.RSAPrivateKey = field(repr=False)

    @classmethod
    def new(cls, kid: str) -> Key:
        return cls(kid, rsa.generate_private_key(public_exponent=65537, key_size=2048))

    def jwk(self) -> dict[str, Any]:
        d: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(self.private))
        return d | {"kid": self.kid, "use": "sig", "alg": "RS256"}

    def sign(self, claims: dict[str, Any], **header: Any) -> str:
        return jwt.encode(claims, self.private, algorithm="RS256", headers={"kid": self.kid} | header)


@dataclass
class Provider:
    issuer: str
    key: Key

    def token(self, *, aud: str = CLIENT_ID, sub: str = "ada", ttl: int = 300, key: Key | None = None,
              **extra: Any) -> str:
        """A token as the provider would sign it (``key``: another, to forge one)."""
        now = int(time.time())
        claims = {"iss": self.issuer, "aud": aud, "sub": sub, "iat": now, "exp": now + ttl}
        claims |= USERS[sub] | extra
        return (key or self.key).sign(claims)


def _installed() -> None:
    if shutil.which("node") is None:
        pytest.fail("the single sign-on tests need node (apt-get install -y nodejs npm)", pytrace=False)
    if not MAIN.exists():
        pytest.fail("the single sign-on tests need the oidc-provider package: make oidc-provider",
                    pytrace=False)


@asynccontextmanager
async def oidc_provider(redirect_uri: str, *, port: int | None = None,
                        key: Key | None = None) -> AsyncIterator[Provider]:
    """The provider on loopback until the block ends."""
    _installed()
    port = port or free_port()
    key = key or Key.new(f"k-{time.monotonic_ns()}")
    cfg = {"port": port, "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "redirect_uri": redirect_uri,
           "users": USERS, "jwks": {"keys": [key.jwk()]}}
    proc = await asyncio.create_subprocess_exec(
        "node", str(SCRIPT), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env=os.environ | {"OIDC_PROVIDER_MAIN": str(MAIN), "OIDC_CONFIG": json.dumps(cfg),
                          "NODE_ENV": "test"})
    assert proc.stdout is not None
    try:
        lines = []
        async with asyncio.timeout(30):
            while True:
                line = (await proc.stdout.readline()).decode()
                if not line:
                    raise RuntimeError("the OpenID provider exited: " + "".join(lines)[-2000:])
                lines.append(line)
                if line.strip() == "ready":
                    break
        yield Provider(f"http://127.0.0.1:{port}", key)
    finally:
        proc.terminate()
        await proc.wait()
