"""Admin operations on keys and teams, kept in the store so every replica sees them."""

from __future__ import annotations

import datetime as dt
import re
import secrets
import time
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from switchyard.core.config import Config
from switchyard.core.errors import InvalidRequest, NotFound
from switchyard.core.settings import Limits
from switchyard.policies.base import model_allowed
from switchyard.policies.keys import KeyRing, digest, doc_names, stored_limits
from switchyard.policies.store import Store

UNSET: Any = object()
# Key ids and team names become parts of store keys, usage records, log lines and metric labels.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}")


def check_name(value: Any, param: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidRequest(f"{param} must be a string of 1 to 64 letters, digits and ._:@- "
                             "(starting with a letter or digit)", param=param)
    return value


def merge_limits(current: Limits, patch: dict[str, Any] | None) -> Limits:
    """``patch`` sets the fields it names (null removes a limit); the rest stay."""
    if patch is None:
        return current
    if not isinstance(patch, dict):
        raise InvalidRequest("limits must be an object", param="limits")
    try:
        return Limits.model_validate({**current.model_dump(), **patch})
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(map(str, err["loc"]))
        raise InvalidRequest(f"limits.{where}: {err['msg']}", param="limits") from None


MAX_GRACE_S = 30 * 86_400


# expires_at is kept as epoch ms and shown as UTC: it must be an instant of the years 1970-9999.
MAX_EXPIRY_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z


def parse_expiry(value: Any) -> int | None:
    """``expires_at``: an RFC 3339 instant (``2027-01-31T00:00:00Z``) or null -> epoch ms."""
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= 64:
        try:
            t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            ms = int(t.timestamp() * 1000) if t.tzinfo is not None else None
        except (ValueError, OverflowError):
            ms = None
        if ms is not None and 0 <= ms <= MAX_EXPIRY_MS:
            return ms
    raise InvalidRequest("expires_at must be an RFC 3339 instant with a time zone between 1970 and "
                         "9999 (UTC), like 2027-01-31T00:00:00Z, or null", param="expires_at")


def _in_grace(doc: dict[str, Any], now_ms: float) -> list[dict[str, Any]]:
    """A key's earlier secrets (from rotations) that still work at ``now_ms``."""
    prev = [*doc.get("older", ()), *([doc["previous"]] if doc.get("previous") else [])]
    return [p for p in prev if p["until_ms"] > now_ms]


def format_ms(ms: int | None) -> str | None:
    if ms is None:
        return None
    ms = min(max(int(ms), 0), MAX_EXPIRY_MS)  # one stored before the bounds were checked still shows
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _patch_limits(current: dict[str, Any], patches: Any, param: str,
                  name: Callable[[str], str]) -> dict[str, Any]:
    """``current`` (name -> limits) with each patch applied: null removes the name, an object
    patches its limits (``name`` checks a new one)."""
    if not isinstance(patches, dict):
        raise InvalidRequest(f"{param} must be an object", param=param)
    out = dict(current)
    for n, patch in patches.items():
        if patch is None:
            out.pop(n, None)
        else:
            out[name(n)] = merge_limits(stored_limits(out.get(n, {})), patch).model_dump()
    return out


def _check_models(models: Any) -> list[str] | None:
    if models is not None and (not isinstance(models, list) or not all(isinstance(m, str) for m in models)):
        raise InvalidRequest("models must be a list of model names or null", param="models")
    return models


def _outside(models: Any, allowed: Any, what: str) -> None:
    """A 400 naming the ``models`` (a list, checked) that ``allowed`` does not cover (``what``
    says whose list that is)."""
    outside = [m for m in _check_models(models) or [] if not model_allowed(m, frozenset(allowed))]
    if outside:
        raise InvalidRequest(f"models: {', '.join(map(str, outside[:5]))} {what}", param="models")


def apply_key_policy(team: dict[str, Any], limits: dict[str, Any] | None, models: Any,
                     expires_at: Any) -> tuple[dict[str, Any] | None, Any, Any]:
    """A new key's (limits, models, expires_at) under its team's key policy (``team``: as
    ``Registry.team`` read it): defaults filled in, or a 400 naming what the policy does not allow."""
    name, policy = team["name"], team["key_policy"] or {}
    if not limits and policy.get("defaults"):
        limits = dict(policy["defaults"])
    allowed = policy.get("models")
    if allowed is not None:
        if models is None:
            models = list(allowed)
        _outside(models, allowed, f"not allowed by team {name!r}'s key policy")
    days = policy.get("max_expiry_days")
    if days is not None:
        latest = int(time.time() * 1000) + days * 86_400_000
        ms = parse_expiry(expires_at)
        if ms is None:
            expires_at = format_ms(latest)
        elif ms > latest:
            raise InvalidRequest(f"expires_at: team {name!r}'s key policy allows at most {days} days",
                                 param="expires_at")
    return limits, models, expires_at


def check_within_team(team: dict[str, Any], limits: dict[str, Any] | None, models: Any) -> None:
    """A 400 when a key's ``limits`` go above its team's (``team``: as ``Registry.team`` read it)
    or ``models`` leave the team's allow-list (what a team admin or member may set; an admin may
    set anything)."""
    name = team["name"]
    given = limits if isinstance(limits, dict) else {}  # not an object: merge_limits says so (400)
    for field, ceiling in team["limits"].items():
        v = given.get(field)
        if isinstance(ceiling, int | float) and not isinstance(ceiling, bool) and \
                isinstance(v, int | float) and not isinstance(v, bool) and v > ceiling:
            raise InvalidRequest(f"limits.{field}: {v} is above team {name!r}'s {ceiling}",
                                 param=f"limits.{field}")
    allowed = team["models"]
    if allowed is not None and models is not UNSET and models is not None:
        _outside(models, allowed, f"not in team {name!r}'s allow-list")


class Registry:
    def __init__(self, config: Config, store: Store, keyring: KeyRing) -> None:
        self.config = config
        self.store = store
        self.keyring = keyring
        self.n = doc_names(store.ns)
        self._cfg_keys = {k.id: k for k in config.keys}
        self._cfg_teams = {t.name: t for t in config.teams}

    async def team_names(self) -> list[str]:
        return sorted(set(self._cfg_teams) | await self.store.members(self.n["teams"]))

    async def _team_doc(self, name: str) -> dict[str, Any] | None:
        (doc,) = await self.store.get_docs([self.n["team"] + name])
        return doc

    async def team(self, name: str) -> dict[str, Any]:
        return self._team_view(name, await self._team_doc(name))

    def _team_view(self, name: str, doc: dict[str, Any] | None) -> dict[str, Any]:
        """The team as the config says it, overridden by what the admin API stored (``doc``)."""
        cfg = self._cfg_teams.get(name)
        if cfg is None and doc is None:
            raise NotFound(f"no team {name!r}")
        doc = doc or {}
        limits = doc["limits"] if "limits" in doc else (cfg.limits.model_dump() if cfg else {})
        models = doc.get("models", cfg.models if cfg else None)
        ml = doc["model_limits"] if "model_limits" in doc else (
            {m: v.model_dump() for m, v in cfg.model_limits.items()} if cfg else {})
        tl = doc["tag_limits"] if "tag_limits" in doc else (
            {t: v.model_dump() for t, v in cfg.tag_limits.items()} if cfg else {})
        eu = doc["end_user_limits"] if "end_user_limits" in doc else (
            cfg.end_user_limits.model_dump() if cfg and cfg.end_user_limits else None)
        return {"name": name, "source": "config" if cfg else "admin", "limits": limits,
                "models": models, "model_limits": ml, "end_user_limits": eu, "tag_limits": tl,
                "key_policy": doc.get("key_policy")}

    async def update_team(self, name: str, *, limits: dict[str, Any] | None = None, models: Any = UNSET,
                          model_limits: dict[str, Any] | None = None, end_user_limits: Any = UNSET,
                          tag_limits: dict[str, Any] | None = None) -> dict[str, Any]:
        """Creates the team when neither the config nor the store knows it."""
        check_name(name, "name")
        doc = await self._team_doc(name) or {}
        try:
            cur = self._team_view(name, doc or None)
        except NotFound:
            cur = {"limits": {}, "models": None, "model_limits": {}, "end_user_limits": None,
                   "tag_limits": {}}
        if limits is not None:
            doc["limits"] = merge_limits(stored_limits(cur["limits"]), limits).model_dump()
        if models is not UNSET:
            doc["models"] = _check_models(models)
        if model_limits is not None:
            doc["model_limits"] = _patch_limits(cur["model_limits"], model_limits, "model_limits", str)
        if end_user_limits is not UNSET:  # null: none; an object patches what there is
            doc["end_user_limits"] = None if end_user_limits is None else merge_limits(
                stored_limits(cur["end_user_limits"] or {}), end_user_limits).model_dump()
        if tag_limits is not None:
            doc["tag_limits"] = _patch_limits(cur["tag_limits"], tag_limits, "tag_limits",
                                              lambda t: check_name(t, "tag_limits"))
        await self.store.put_doc(self.n["team"] + name, doc)
        await self.store.add_member(self.n["teams"], name)
        self.keyring.forget()
        return self._team_view(name, doc)

    async def set_key_policy(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """The team's key policy: ``defaults`` (limits a new key gets unless it names its own),
        ``max_expiry_days`` (the longest a key may live; a key without an expiry gets it), and
        ``models`` (what a key may be allowed). Null clears a field; the rest stay."""
        cur = await self.team(name)
        policy = dict(cur["key_policy"] or {})
        if "defaults" in body:
            policy["defaults"] = merge_limits(Limits(), body["defaults"]).model_dump(exclude_none=True) \
                if body["defaults"] is not None else None
        if "max_expiry_days" in body:
            days = body["max_expiry_days"]
            if days is not None and (not isinstance(days, int) or isinstance(days, bool)
                                     or not 1 <= days <= 3650):
                raise InvalidRequest("max_expiry_days must be an integer from 1 to 3650, or null",
                                     param="max_expiry_days")
            policy["max_expiry_days"] = days
        if "models" in body:
            policy["models"] = _check_models(body["models"])
        unknown = set(body) - {"defaults", "max_expiry_days", "models"}
        if unknown:
            raise InvalidRequest(f"key_policy takes defaults, max_expiry_days and models; not "
                                 f"{', '.join(sorted(unknown))[:200]}", param=sorted(unknown)[0][:64])
        doc = await self._team_doc(name) or {}
        await self.store.put_doc(self.n["team"] + name, doc | {"key_policy": policy})
        await self.store.add_member(self.n["teams"], name)
        return await self.team(name)

    async def create_key(self, team: dict[str, Any], *, key_id: str | None = None, models: Any = None,
                         limits: dict[str, Any] | None = None,
                         expires_at: Any = None, created_by: str = "master") -> tuple[str, dict[str, Any]]:
        """Returns the raw key (shown this once; only its sha256 is stored) and the key's info.
        ``team``: as ``Registry.team`` read it (so it exists); ``created_by``: ``master``, an admin
        token's id, or the user it was made for."""
        key_id = check_name(key_id, "id") if key_id is not None else f"key-{secrets.token_hex(6)}"
        if key_id in self._cfg_keys or (await self.store.get_docs([self.n["keyid"] + key_id]))[0]:
            raise InvalidRequest(f"a key with id {key_id!r} exists", param="id")
        raw = "sk-sy-" + secrets.token_urlsafe(32)
        d = digest(raw)
        doc = {"id": key_id, "team": team["name"], "models": _check_models(models),
               "limits": merge_limits(Limits(), limits).model_dump(exclude_none=True),
               "revoked": False, "created_ms": int(time.time() * 1000),
               "expires_ms": parse_expiry(expires_at), "created_by": created_by}
        await self.store.put_doc(self.n["key"] + d, doc)
        await self.store.put_doc(self.n["keyid"] + key_id, {"digest": d})
        await self.store.add_member(self.n["keys"], key_id)
        return raw, await self.key(key_id)

    async def _locate(self, key_id: str) -> tuple[str, dict[str, Any]]:
        """(doc name, doc) where the key's mutable state lives; a config key's is its override."""
        if key_id in self._cfg_keys:
            name = self.n["keyover"] + key_id
            (doc,) = await self.store.get_docs([name])
            return name, doc or {}
        (ref,) = await self.store.get_docs([self.n["keyid"] + key_id])
        if ref is None:
            raise NotFound(f"no key {key_id!r}")
        name = self.n["key"] + ref["digest"]
        (doc,) = await self.store.get_docs([name])
        if doc is None:
            raise NotFound(f"no key {key_id!r}")
        return name, doc

    async def key(self, key_id: str) -> dict[str, Any]:
        _, doc = await self._locate(key_id)
        cfg = self._cfg_keys.get(key_id)
        expiry = {"expires_at": format_ms(doc.get("expires_ms"))}
        if cfg is not None:
            limits = doc.get("limits", cfg.limits.model_dump())
            models = doc.get("models", cfg.models)
            return {"id": key_id, "team": cfg.team, "source": "config", "models": models,
                    "limits": {k: v for k, v in limits.items() if v is not None},
                    "revoked": bool(doc.get("revoked")), "created_by": None} | expiry
        prev = doc.get("previous")
        grace = {"previous_valid_until": format_ms(prev["until_ms"])} if prev else {}
        return {"id": key_id, "team": doc["team"], "source": "admin", "models": doc.get("models"),
                "limits": {k: v for k, v in doc.get("limits", {}).items() if v is not None},
                "revoked": bool(doc.get("revoked")), "created_ms": doc.get("created_ms"),
                "created_by": doc.get("created_by")} | expiry | grace

    async def keys(self) -> list[dict[str, Any]]:
        ids = sorted(set(self._cfg_keys) | await self.store.members(self.n["keys"]))
        return [await self.key(i) for i in ids]

    async def update_key(self, key_id: str, *, limits: dict[str, Any] | None = None,
                         models: Any = UNSET, revoked: bool | None = None,
                         expires_at: Any = UNSET) -> dict[str, Any]:
        name, doc = await self._locate(key_id)
        if expires_at is not UNSET:
            doc["expires_ms"] = parse_expiry(expires_at)
        if limits is not None:
            cur = await self.key(key_id)
            doc["limits"] = merge_limits(stored_limits(cur["limits"]), limits).model_dump()
        if models is not UNSET:
            doc["models"] = _check_models(models)
        if revoked is not None:
            doc["revoked"] = revoked
        await self.store.put_doc(name, doc)
        if revoked:
            # A rotated key's old secrets, still in their grace periods, are revoked with it.
            for prev in _in_grace(doc, time.time() * 1000):
                old_name = self.n["key"] + prev["digest"]
                (old,) = await self.store.get_docs([old_name])
                if old is not None:
                    await self.store.put_doc(old_name, old | {"revoked": True},
                                             ttl_ms=int(prev["until_ms"] - time.time() * 1000) + 60_000)
        self.keyring.forget()
        return await self.key(key_id)

    async def rotate(self, key_id: str, *, grace_seconds: Any = 0) -> tuple[str, dict[str, Any]]:
        """A new secret for the key (returned this once); the old one keeps working for
        ``grace_seconds`` (0: not at all), then is refused. Limits, allowlists, expiry carry over."""
        if not isinstance(grace_seconds, int) or isinstance(grace_seconds, bool) or \
                not 0 <= grace_seconds <= MAX_GRACE_S:
            raise InvalidRequest(f"grace_seconds must be an integer from 0 to {MAX_GRACE_S}",
                                 param="grace_seconds")
        if key_id in self._cfg_keys:
            raise InvalidRequest(f"{key_id!r} is a config key: rotate it in the config (keys[].key or "
                                 "keys[].sha256)", param="key_id")
        name, doc = await self._locate(key_id)
        if doc.get("revoked"):
            raise InvalidRequest(f"key {key_id!r} is revoked", param="key_id")
        now = int(time.time() * 1000)
        if doc.get("expires_ms") is not None and doc["expires_ms"] <= now:
            # Checked before anything is written: a rotation would carry the expiry over anyway.
            raise InvalidRequest(f"key {key_id!r} has expired: give it a later expires_at (PATCH) "
                                 "before rotating it", param="key_id")
        until = now + grace_seconds * 1000
        old_expiry = doc.get("expires_ms")
        old_until = min(until, old_expiry) if old_expiry is not None else until
        raw = "sk-sy-" + secrets.token_urlsafe(32)
        d = digest(raw)
        old_digest = name.removeprefix(self.n["key"])
        # Every earlier secret still in its grace stays listed, so a revocation reaches them all.
        new = {k: v for k, v in doc.items() if k not in ("previous", "older")} | {
            "previous": {"digest": old_digest, "until_ms": old_until}, "older": _in_grace(doc, now)}
        await self.store.put_doc(self.n["key"] + d, new)
        # The old secret's doc outlives its grace by a minute (a clear refusal meanwhile), then goes.
        await self.store.put_doc(name, doc | {"expires_ms": old_until},
                                 ttl_ms=max(old_until - now, 0) + 60_000)
        await self.store.put_doc(self.n["keyid"] + key_id, {"digest": d})
        self.keyring.forget()
        return raw, await self.key(key_id)

    async def revoke(self, key_id: str) -> dict[str, Any]:
        return await self.update_key(key_id, revoked=True)
