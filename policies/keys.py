"""Key lookup: the raw key a caller sent -> the Principal it names, or None.

Keys are stored and compared as sha256 digests (constant time), never kept or logged in plain.
"""

from __future__ import annotations

import hashlib
import hmac

from gateway.config import Config
from policies.base import Principal


def digest(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


class KeyRing:
    def __init__(self, principals: dict[str, Principal]) -> None:
        self._by_digest = principals  # sha256 hex -> Principal

    @classmethod
    def from_config(cls, config: Config) -> KeyRing:
        teams = {t.name: t for t in config.teams}
        out: dict[str, Principal] = {}
        for k in config.keys:
            team = teams[k.team]
            out[k.sha256 or digest(k.key or "")] = Principal(
                key_id=k.id, team=k.team, key_limits=k.limits, team_limits=team.limits,
                team_model_limits=dict(team.model_limits),
                key_models=frozenset(k.models) if k.models is not None else None,
                team_models=frozenset(team.models) if team.models is not None else None,
                strict=k.strict, default_model=k.default_model, timeout=k.timeout,
            )
        return cls(out)

    async def lookup(self, raw_key: str) -> Principal | None:
        d = digest(raw_key)
        found = self._by_digest.get(d)
        # The dict lookup finds the candidate; the final comparison is constant-time.
        if found is not None and hmac.compare_digest(d, d if d in self._by_digest else ""):
            return found
        return None
