"""Admin API tokens: a role and a scope for machines, without the master key.

A token reads ``sy-at-<id>.<secret>``; the store keeps only the sha256 of the whole token, in the
document ``<ns>:atoken:<id>`` (listed in the set ``<ns>:atokens``), through the store's generic
document methods, so a durable store keeps tokens across restarts with no code of its own. The
check finds the document by id and compares digests with ``hmac.compare_digest``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Any

from switchyard.core.errors import InvalidRequest, NotFound
from switchyard.policies.registry import check_name, format_ms, parse_expiry
from switchyard.policies.roles import ROLES, Actor
from switchyard.policies.store import Store

PREFIX = "sy-at-"
# Roles that may cover every team (no ``teams``); the others act for named teams only.
ALL_TEAMS_ROLES = ("admin", "viewer")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class AdminTokens:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._doc = f"{store.ns}:atoken:"
        self._set = f"{store.ns}:atokens"

    async def create(self, body: dict[str, Any], *, created_by: str) -> tuple[str, dict[str, Any]]:
        """(the token, shown this once; its info). ``body``: role, teams?, user?, expires_at?."""
        role = body.get("role")
        if role not in ROLES:
            raise InvalidRequest(f"role must be one of {', '.join(ROLES)}", param="role")
        teams = body.get("teams")
        if teams is not None:
            if not isinstance(teams, list) or not teams or len(teams) > 100:
                raise InvalidRequest("teams must be a list of 1 to 100 team names", param="teams")
            teams = sorted({check_name(t, "teams") for t in teams})
        elif role not in ALL_TEAMS_ROLES:
            raise InvalidRequest(f"a {role} token needs teams (only {' and '.join(ALL_TEAMS_ROLES)} "
                                 "may cover every team)", param="teams")
        user = body.get("user")
        if user is not None:
            user = check_name(user, "user")
        elif role == "member":
            raise InvalidRequest("a member token needs user (the person it acts for)", param="user")
        token_id = f"tok-{secrets.token_hex(8)}"
        token = f"{PREFIX}{token_id}.{secrets.token_urlsafe(32)}"
        doc = {"id": token_id, "role": role, "teams": teams, "user": user, "digest": _digest(token),
               "expires_ms": parse_expiry(body.get("expires_at")), "revoked": False,
               "created_ms": int(time.time() * 1000), "created_by": created_by}
        await self.store.put_doc(self._doc + token_id, doc)
        await self.store.add_member(self._set, token_id)
        return token, self.info(doc)

    @staticmethod
    def info(doc: dict[str, Any]) -> dict[str, Any]:
        """What a token's owner may see again: everything but the digest."""
        return {"id": doc["id"], "role": doc["role"], "teams": doc["teams"], "user": doc["user"],
                "expires_at": format_ms(doc["expires_ms"]), "revoked": doc["revoked"],
                "created_at": format_ms(doc["created_ms"]), "created_by": doc["created_by"]}

    async def get(self, token_id: str) -> dict[str, Any]:
        (doc,) = await self.store.get_docs([self._doc + token_id])
        if doc is None:
            raise NotFound(f"no token {token_id[:64]!r}", param="token_id")
        return doc

    async def list(self) -> list[dict[str, Any]]:
        ids = sorted(await self.store.members(self._set))
        docs = await self.store.get_docs([self._doc + i for i in ids]) if ids else []
        return [self.info(d) for d in docs if d is not None]

    async def revoke(self, token_id: str) -> dict[str, Any]:
        doc = await self.get(token_id) | {"revoked": True}
        await self.store.put_doc(self._doc + token_id, doc)
        return self.info(doc)

    async def actor(self, token: str) -> Actor | None:
        """The actor a presented token stands for; None when it is not a live token."""
        token_id, dot, _ = token.removeprefix(PREFIX).partition(".")
        if not token.startswith(PREFIX) or not dot or len(token) > 256:
            return None
        (doc,) = await self.store.get_docs([self._doc + token_id])
        if doc is None or not hmac.compare_digest(doc["digest"], _digest(token)):
            return None
        if doc["revoked"] or (doc["expires_ms"] is not None and time.time() * 1000 >= doc["expires_ms"]):
            return None
        teams = doc["teams"]
        return Actor(id=token_id, role=doc["role"], teams=frozenset(teams) if teams is not None else None,
                     user=doc["user"], kind="token")
