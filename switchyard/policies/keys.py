"""Key lookup: the raw key a caller sent -> the Principal it names, or None.

Keys are stored and compared as sha256 digests, never kept or logged in plain. Keys come from the
config and from the store (created through the admin API, so every replica finds them); admin
overrides (limits, allowlists, revocation) live in the store too. Answers are cached for ``ttl``
seconds, so a revocation takes effect everywhere within that time. When the store is down the
last known answer stands, config keys fall back to the config, and any other key gets a 503
(never a 401: the key may well be valid).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from pydantic import ValidationError

from switchyard.core.config import Config, KeyConfig, TeamConfig
from switchyard.core.errors import Unavailable
from switchyard.core.settings import Limits
from switchyard.policies.base import Principal
from switchyard.policies.store import Store, StoreDown


def digest(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


def doc_names(ns: str) -> dict[str, str]:
    """Document and set names, shared with ``switchyard.policies.registry``."""
    return {"key": f"{ns}:key:", "keyid": f"{ns}:keyid:", "keyover": f"{ns}:keyover:",
            "team": f"{ns}:team:", "keys": f"{ns}:keys", "teams": f"{ns}:teams"}


def _models(v: Any) -> frozenset[str] | None:
    return frozenset(v) if v is not None else None


def stored_limits(d: dict[str, Any]) -> Limits:
    """Limits kept in the store. One written before the bounds were checked (``spend_per_day:
    1e300``) is read at the bound (as unlimited in effect as it was meant), not refused."""
    try:
        return Limits.model_validate(d)
    except ValidationError:
        fixed = dict(d)
        for k, v in d.items():
            f = Limits.model_fields.get(k)
            le = next((m.le for m in f.metadata if getattr(m, "le", None) is not None), None) if f else None
            if le is not None and isinstance(v, int | float) and not isinstance(v, bool) and v > le:
                fixed[k] = le
        return Limits.model_validate(fixed)


def make_principal(key_id: str, team: str, key_limits: Limits, key_models: list[str] | None,
                   team_cfg: TeamConfig | None, team_doc: dict[str, Any] | None,
                   key_cfg: KeyConfig | None = None, expires_ms: int | None = None) -> Principal:
    team_doc = team_doc or {}
    team_limits = team_cfg.limits if team_cfg else Limits()
    if "limits" in team_doc:
        team_limits = stored_limits(team_doc["limits"])
    model_limits = dict(team_cfg.model_limits) if team_cfg else {}
    if "model_limits" in team_doc:
        model_limits = {m: stored_limits(v) for m, v in team_doc["model_limits"].items()}
    team_models = team_cfg.models if team_cfg else None
    if "models" in team_doc:
        team_models = team_doc["models"]
    end_user_limits = team_cfg.end_user_limits if team_cfg else None
    if "end_user_limits" in team_doc:
        eu = team_doc["end_user_limits"]
        end_user_limits = stored_limits(eu) if eu is not None else None
    tag_limits = dict(team_cfg.tag_limits) if team_cfg else {}
    if "tag_limits" in team_doc:
        tag_limits = {t: stored_limits(v) for t, v in team_doc["tag_limits"].items()}
    return Principal(
        key_id=key_id, team=team, key_limits=key_limits, team_limits=team_limits,
        team_model_limits=model_limits, team_end_user_limits=end_user_limits, team_tag_limits=tag_limits,
        key_models=_models(key_models), team_models=_models(team_models),
        strict=key_cfg.strict if key_cfg else False,
        default_model=key_cfg.default_model if key_cfg else None,
        timeout=key_cfg.timeout if key_cfg else None, expires_ms=expires_ms,
        cache=(key_cfg.cache if key_cfg else None) or (team_cfg.cache if team_cfg else None),
    )


class KeyRing:
    def __init__(self, principals: dict[str, Principal], *, store: Store | None = None,
                 config: Config | None = None, ttl: float = 1.0) -> None:
        self._by_digest = principals  # sha256 hex -> Principal, from the config
        self._store = store
        self._ttl = ttl
        self._names = doc_names(store.ns) if store is not None else {}
        self._key_cfg = {k.id: k for k in config.keys} if config else {}
        self._team_cfg = {t.name: t for t in config.teams} if config else {}
        self._cache: dict[str, tuple[float, Principal | None]] = {}

    @classmethod
    def from_config(cls, config: Config, store: Store | None = None, ttl: float = 1.0) -> KeyRing:
        teams = {t.name: t for t in config.teams}
        out: dict[str, Principal] = {}
        for k in config.keys:
            out[k.sha256 or digest(k.key or "")] = make_principal(
                k.id, k.team, k.limits, k.models, teams[k.team], None, k)
        return cls(out, store=store, config=config, ttl=ttl)

    async def lookup(self, raw_key: str) -> Principal | None:
        p = await self._lookup(raw_key)
        # Expiry is checked on every call, not cached: a key stops working at its instant.
        if p is not None and p.expires_ms is not None and time.time() * 1000 >= p.expires_ms:
            return None
        return p

    async def expired(self, raw_key: str) -> bool:
        """Whether ``raw_key`` names a key past its expiry (for the refusal's reason; cached)."""
        p = await self._lookup(raw_key)
        return p is not None and p.expires_ms is not None and time.time() * 1000 >= p.expires_ms

    async def _lookup(self, raw_key: str) -> Principal | None:
        # A digest is compared as a dict key: the attacker controls the input to sha256, not its
        # output, so the lookup's timing reveals nothing about a stored key.
        d = digest(raw_key)
        if self._store is None:
            return self._by_digest.get(d)
        hit = self._cache.get(d)
        now = time.monotonic()
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            found = await self._resolve(d)
        except StoreDown:
            if hit is not None:
                return hit[1]
            known = self._by_digest.get(d)
            if known is None:  # maybe a key made through the admin API: we cannot tell, not "invalid"
                raise Unavailable("the policy store is unavailable, so this key cannot be checked; "
                                  "try again shortly", headers={"Retry-After": "1"}) from None
            return known
        if hit is not None and hit[1] is not None and hit[1] == found:
            found = hit[1]  # keep the object identical: the limiter caches plans by identity
        if len(self._cache) > 100_000:
            self._cache.clear()
        self._cache[d] = (now + self._ttl, found)
        return found

    def forget(self) -> None:
        """Drop cached answers (the admin API calls it so its own replica sees changes at once)."""
        self._cache.clear()

    async def _resolve(self, d: str) -> Principal | None:
        assert self._store is not None
        n = self._names
        base = self._by_digest.get(d)
        if base is not None:
            over, team_doc = await self._store.get_docs([n["keyover"] + base.key_id, n["team"] + base.team])
            over = over or {}
            if over.get("revoked"):
                return None
            if not over and not team_doc:
                return base
            kc = self._key_cfg.get(base.key_id)
            limits = (stored_limits(over["limits"]) if "limits" in over
                      else kc.limits if kc else Limits())
            models = over.get("models", kc.models if kc else None)
            return make_principal(base.key_id, base.team, limits, models, self._team_cfg.get(base.team),
                                  team_doc, kc, over.get("expires_ms"))
        (doc,) = await self._store.get_docs([n["key"] + d])
        if doc is None or doc.get("revoked"):
            return None
        (team_doc,) = await self._store.get_docs([n["team"] + doc["team"]])
        return make_principal(doc["id"], doc["team"], stored_limits(doc.get("limits") or {}),
                              doc.get("models"), self._team_cfg.get(doc["team"]), team_doc,
                              expires_ms=doc.get("expires_ms"))
