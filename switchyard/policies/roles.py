"""Who may do what on /admin: the roles as one table, and the ability each route needs as another.

An actor (the master key, an admin API token, a console session) has one role and, unless it
covers every team, a set of teams. A route needs one ability; the role gives that ability a
reach, or lacks it (a 403 naming the ability and the roles that have it):

- ``team``: within the actor's teams (every team when it names none: an admin, a global viewer);
- ``own``: within its teams, and only the keys its ``user`` created (a member);
- ``global``: only an actor that names no teams (deployments are not any team's).

A route missing from ``ROUTES`` is refused to everyone, so a new route is closed until listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from switchyard.core.errors import Forbidden

TEAM, OWN, GLOBAL = "team", "own", "global"

ABILITIES = ("self.read", "keys.read", "keys.write", "teams.read", "teams.write", "policy.write",
             "usage.read", "tokens.read", "tokens.write", "deployments.read", "deployments.write",
             "audit.read")

# role -> ability -> reach
ROLES: dict[str, dict[str, str]] = {
    "admin": dict.fromkeys(ABILITIES, TEAM) | {"deployments.read": GLOBAL, "deployments.write": GLOBAL},
    "team_admin": {"self.read": TEAM, "keys.read": TEAM, "keys.write": TEAM, "teams.read": TEAM,
                   "policy.write": TEAM, "usage.read": TEAM, "tokens.read": TEAM, "tokens.write": TEAM,
                   "audit.read": TEAM},
    "member": {"self.read": TEAM, "keys.read": OWN, "keys.write": OWN, "teams.read": TEAM,
               "usage.read": OWN},
    "viewer": {"self.read": TEAM, "keys.read": TEAM, "teams.read": TEAM, "usage.read": TEAM,
               "tokens.read": TEAM, "deployments.read": GLOBAL, "audit.read": TEAM},
}

# (method, path template) -> the ability the route needs.
ROUTES: dict[tuple[str, str], str] = {
    ("GET", "/admin/me"): "self.read",
    ("POST", "/admin/keys"): "keys.write",
    ("GET", "/admin/keys"): "keys.read",
    ("GET", "/admin/keys/{key_id}"): "keys.read",
    ("PATCH", "/admin/keys/{key_id}"): "keys.write",
    ("DELETE", "/admin/keys/{key_id}"): "keys.write",
    ("POST", "/admin/keys/{key_id}/rotate"): "keys.write",
    ("POST", "/admin/keys/{key_id}/revoke"): "keys.write",
    ("GET", "/admin/teams"): "teams.read",
    ("GET", "/admin/teams/{name}"): "teams.read",
    ("PUT", "/admin/teams/{name}"): "teams.write",
    ("PATCH", "/admin/teams/{name}"): "teams.write",
    ("PUT", "/admin/teams/{name}/key_policy"): "policy.write",
    ("GET", "/admin/usage"): "usage.read",
    ("GET", "/admin/usage/records"): "usage.read",
    ("GET", "/admin/usage/latency"): "usage.read",
    ("GET", "/admin/overview"): "usage.read",
    ("GET", "/admin/deployments"): "deployments.read",
    ("POST", "/admin/deployments/reset"): "deployments.write",
    ("POST", "/admin/tokens"): "tokens.write",
    ("GET", "/admin/tokens"): "tokens.read",
    ("DELETE", "/admin/tokens/{token_id}"): "tokens.write",
    ("GET", "/admin/audit"): "audit.read",
}


def roles_with(ability: str) -> list[str]:
    return [r for r, abilities in ROLES.items() if ability in abilities]


@dataclass(frozen=True, slots=True)
class Actor:
    """Who is calling /admin. ``id``: ``master``, an admin token's id, or a user's subject."""

    id: str
    role: str
    teams: frozenset[str] | None = None  # None: every team
    user: str | None = None  # whom a member acts for: the keys it creates are this user's
    email: str | None = None
    kind: str = "master"  # master | token | user
    name: str | None = None  # a signed-in user's display name

    def reach(self, ability: str) -> str:
        """The reach of ``ability`` for this actor, or a 403 naming what is missing."""
        reach = ROLES.get(self.role, {}).get(ability)
        if reach is None:
            raise Forbidden(
                f"this needs {ability}, which the role(s) {', '.join(roles_with(ability))} have; "
                f"you are {self.role}", param=ability)
        if reach == GLOBAL and self.teams is not None:
            raise Forbidden(f"this needs {ability} over every team; you have "
                            f"{self.role} for named teams only", param=ability)
        return reach

    def sees(self, team: str) -> bool:
        return self.teams is None or team in self.teams

    def check_team(self, team: Any, ability: str) -> None:
        """A 403 unless ``team`` is one of this actor's (the message names only what was sent)."""
        self.reach(ability)
        if self.teams is not None and team not in self.teams:
            raise Forbidden(f"{ability} on team {str(team)[:64]!r}: not one of your "
                                            "teams")

    def owns(self, key: dict[str, Any], ability: str) -> bool:
        """Whether ``key`` (its info) is within this actor's reach for ``ability``."""
        reach = self.reach(ability)
        if not self.sees(key["team"]):
            return False
        return reach != OWN or (self.user is not None and key.get("created_by") == self.user)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "role": self.role,
                "teams": sorted(self.teams) if self.teams is not None else None, "user": self.user,
                "email": self.email, "name": self.name}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Actor:
        teams = d.get("teams")
        return cls(id=d["id"], role=d["role"], teams=frozenset(teams) if teams is not None else None,
                   user=d.get("user"), email=d.get("email"), kind=d.get("kind", "master"), name=d.get("name"))


MASTER = Actor(id="master", role="admin", kind="master")
