"""Single sign-on over OpenID Connect: the authorization code flow with PKCE for the console, and
the provider's JWT access tokens as Bearer on /admin.

Discovery reads ``<issuer>/.well-known/openid-configuration`` once (its ``issuer`` must be the
configured one). The provider's keys (JWKS) are cached for ``jwks_cache_s``; a token signed with a
key id not in the cache fetches them again (at most every ``REFETCH_S``), so a rotated key is
picked up. A token is checked with PyJWT: signature, ``iss``, ``aud``, ``exp`` (and ``iat``), and
its ``alg`` must be in the configured allow-list, which admits asymmetric algorithms only (never
``none``, never an HMAC that a public key could forge). An ID token must also carry the nonce of
its sign-in, and a nonce is accepted once.

The sign-in's state, nonce and PKCE verifier are kept in the store under the sha256 of the state
for ``FLOW_TTL_S`` and used once; the state is also in a cookie of the browser that started the
sign-in, so a callback from another browser (login CSRF) is refused.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import httpx

from switchyard.core.settings import OidcConfig
from switchyard.policies.roles import Actor
from switchyard.policies.store import Store

if TYPE_CHECKING:
    import jwt

FLOW_TTL_S = 600  # a sign-in must come back from the provider within ten minutes
REFETCH_S = 10.0  # an unknown key id fetches the JWKS again at most this often
LEEWAY_S = 30  # clock skew allowed on exp/iat/nbf
STATE_COOKIE = "sy_oidc"


class OidcError(Exception):
    """A sign-in or token refused; the message says why (never the token)."""


def _sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def _jwt() -> Any:
    """PyJWT (with cryptography: ~15 MiB), imported only where single sign-on is configured."""
    import jwt

    return jwt


class Oidc:
    def __init__(self, cfg: OidcConfig, store: Store, *, client: httpx.AsyncClient | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.issuer = cfg.issuer.rstrip("/")
        self._client = client or httpx.AsyncClient(timeout=10.0)
        self._meta: dict[str, Any] | None = None
        self._keys: dict[str, jwt.PyJWK] = {}  # by key id
        self._keys_at = 0.0
        self.refetch_s = REFETCH_S
        self._lock = asyncio.Lock()
        self._flows = f"{store.ns}:oidc:flow:"
        self._nonces = f"{store.ns}:oidc:nonce:"

    def __deepcopy__(self, memo: dict[int, Any]) -> Oidc:
        return self

    async def aclose(self) -> None:
        await self._client.aclose()

    async def metadata(self) -> dict[str, Any]:
        if self._meta is None:
            try:
                r = await self._client.get(f"{self.issuer}/.well-known/openid-configuration")
                r.raise_for_status()
                meta = r.json()
            except (httpx.HTTPError, ValueError) as e:
                raise OidcError(f"the provider's discovery document could not be read: {type(e).__name__}") \
                    from None
            if meta.get("issuer", "").rstrip("/") != self.issuer:
                raise OidcError("the provider's discovery document names another issuer")
            self._meta = meta
        return self._meta

    async def _fetch_keys(self) -> None:
        meta = await self.metadata()
        jwt = _jwt()
        try:
            r = await self._client.get(meta["jwks_uri"])
            r.raise_for_status()
            jwks = jwt.PyJWKSet.from_dict(r.json())
        except (httpx.HTTPError, ValueError, KeyError, jwt.PyJWTError) as e:
            raise OidcError(f"the provider's keys could not be read: {type(e).__name__}") from None
        self._keys = {k.key_id or "": k for k in jwks.keys}
        self._keys_at = time.monotonic()

    async def key(self, kid: str) -> jwt.PyJWK:
        async with self._lock:
            age = time.monotonic() - self._keys_at
            stale = age > self.cfg.jwks_cache_s or (kid not in self._keys and age > self.refetch_s)
            if not self._keys or stale:
                await self._fetch_keys()
        found = self._keys.get(kid) or (next(iter(self._keys.values())) if not kid and len(self._keys) == 1
                                         else None)
        if found is None:
            raise OidcError("the token is signed with a key the provider does not publish")
        return found

    async def verify(self, token: str, *, audience: str, nonce: str | None = None) -> dict[str, Any]:
        """The token's claims once its signature, issuer, audience, expiry, algorithm and (for an
        ID token) nonce hold; else OidcError."""
        jwt = _jwt()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise OidcError("the token is not a JWT") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.cfg.algorithms:
            raise OidcError(f"the token's algorithm {str(alg)[:16]!r} is not allowed")
        key = await self.key(str(header.get("kid") or ""))
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=[alg], audience=audience, issuer=self.issuer, leeway=LEEWAY_S,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]})
        except jwt.ExpiredSignatureError:
            raise OidcError("the token has expired") from None
        except jwt.InvalidAudienceError:
            raise OidcError("the token is for another audience") from None
        except jwt.InvalidIssuerError:
            raise OidcError("the token is from another issuer") from None
        except jwt.PyJWTError as e:
            raise OidcError(f"the token is not valid ({type(e).__name__})") from None
        if nonce is not None:
            got = claims.get("nonce")
            if not isinstance(got, str) or not hmac.compare_digest(got.encode(), nonce.encode()):
                raise OidcError("the ID token's nonce is not this sign-in's")
            name = self._nonces + _sha(got)
            (seen,) = await self.store.get_docs([name])
            if seen is not None:
                raise OidcError("the ID token's nonce was used before")
            left = int(claims["exp"]) - int(time.time()) + LEEWAY_S
            await self.store.put_doc(name, {"used": True}, ttl_ms=max(left, 60) * 1000)
        return claims

    # -- the sign-in ---------------------------------------------------------------------------

    async def start(self, redirect_uri: str) -> tuple[str, str]:
        """(the provider's authorization URL to send the browser to, the state for its cookie)."""
        meta = await self.metadata()
        state, nonce, verifier = (secrets.token_urlsafe(32) for _ in range(3))
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        await self.store.put_doc(self._flows + _sha(state), {"nonce": nonce, "verifier": verifier,
                                                              "redirect_uri": redirect_uri},
                                 ttl_ms=FLOW_TTL_S * 1000)
        q = {"response_type": "code", "client_id": self.cfg.client_id, "redirect_uri": redirect_uri,
             "scope": " ".join(self.cfg.scopes), "state": state, "nonce": nonce,
             "code_challenge": challenge, "code_challenge_method": "S256"}
        return f"{meta['authorization_endpoint']}?{urlencode(q)}", state

    async def finish(self, *, code: str, state: str, cookie_state: str | None) -> dict[str, Any]:
        """The ID token's claims for a callback; OidcError when anything does not hold."""
        if not cookie_state or not hmac.compare_digest(state.encode(), cookie_state.encode()):
            raise OidcError("the sign-in's state does not match this browser's")
        name = self._flows + _sha(state)
        (flow,) = await self.store.get_docs([name])
        if flow is None or flow.get("used"):
            raise OidcError("the sign-in's state is unknown, used or expired")
        await self.store.put_doc(name, {"used": True}, ttl_ms=FLOW_TTL_S * 1000)  # once only
        meta = await self.metadata()
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": flow["redirect_uri"],
                "code_verifier": flow["verifier"], "client_id": self.cfg.client_id}
        try:
            if self.cfg.client_secret:  # client_secret_basic
                r = await self._client.post(meta["token_endpoint"], data=form,
                                            auth=(self.cfg.client_id, self.cfg.client_secret))
            else:
                r = await self._client.post(meta["token_endpoint"], data=form)
            body = r.json()
        except (httpx.HTTPError, ValueError) as e:
            raise OidcError(f"the provider's token endpoint did not answer: {type(e).__name__}") from None
        if r.status_code != 200 or not isinstance(body.get("id_token"), str):
            raise OidcError(f"the provider refused the code ({str(body.get('error', r.status_code))[:64]})")
        return await self.verify(body["id_token"], audience=self.cfg.client_id, nonce=flow["nonce"])

    def actor(self, claims: dict[str, Any]) -> Actor:
        """The actor the claims map to (the first rule matched gives the role; that role's
        matching rules give the teams); OidcError when no rule matches."""
        role: str | None = None
        teams: set[str] | None = set()
        for rule in self.cfg.roles:
            v = claims.get(rule.claim)
            hit = rule.value in v if isinstance(v, list) else v == rule.value
            if not hit or (role is not None and rule.role != role):
                continue
            role = rule.role
            if rule.teams is None or teams is None:
                teams = None
            else:
                teams |= set(rule.teams)
        if role is None:
            raise OidcError("no role is given to this user (console.oidc.roles)")
        email = claims.get(self.cfg.email_claim)
        name = claims.get(self.cfg.name_claim)
        sub = str(claims["sub"])[:128]
        return Actor(id=sub, role=role, teams=frozenset(teams) if teams is not None else None, user=sub,
                     email=str(email)[:256] if email else None, kind="user",
                     name=str(name)[:128] if name else None)
