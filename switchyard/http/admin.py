"""/admin: keys, teams, usage and admin tokens, guarded by the master key, an admin token or a
console session (``switchyard.http.admin_auth``); each route's role in
``switchyard.policies.roles``, each answer narrowed to the caller's teams (and a member's keys)."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import msgspec
from litestar import Request, Response, Router, delete, get, patch, post, put
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException, SerializationException
from litestar.params import FromPath

from switchyard.core.errors import Forbidden, GatewayError, InvalidRequest, NotFound
from switchyard.dialects.errors import openai_error
from switchyard.http.admin_auth import AdminAuth, actor_of
from switchyard.policies.registry import UNSET, Registry, apply_key_policy, check_within_team
from switchyard.policies.roles import OWN, ROLES, Actor
from switchyard.policies.store import StoreDown, StoreSlow, UsageRecord
from switchyard.policies.usage import UsageSource
from switchyard.policies.usage_filter import UsageFilter, parse_filter, to_csv

RECORD_FIELDS = tuple(UsageRecord.__dataclass_fields__)


log = logging.getLogger("switchyard.admin")
# Bodies are JSON objects a few levels deep; deeper nesting is refused before it is walked.
MAX_DEPTH = 32


def error_response(status: int, type_: str, message: str, param: str | None = None,
                   headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(openai_error(message, type_, param), status_code=status, headers=headers or {})


def on_bug(request: Request[Any, Any, Any], e: Exception) -> Response[Any]:
    # The cause (with its stack) goes to the log under the request id; the body says only that.
    log.error("%s %s failed", request.method, request.scope.get("path_template") or "-", exc_info=e)
    return error_response(500, "server_error", "internal error; it has been logged with this request's id")


def _on_gateway_error(_: Request[Any, Any, Any], e: GatewayError) -> Response[Any]:
    return error_response(e.status, e.type, e.message, e.param, e.headers)


def _on_store_down(_: Request[Any, Any, Any], e: StoreDown) -> Response[Any]:
    return error_response(503, "service_unavailable", f"the policy store is unavailable: {e}",
                          headers={"Retry-After": "1"})


def _on_store_slow(_: Request[Any, Any, Any], e: StoreSlow) -> Response[Any]:
    # The store answers; this read is just big. Not "unavailable": say how to make it smaller.
    return error_response(504, "timeout_error", f"{e}: narrow the query (a shorter from..to, a lower "
                          "limit, one team)", headers={"Retry-After": "1"})


def _on_unauthorized(_: Request[Any, Any, Any], e: NotAuthorizedException) -> Response[Any]:
    return error_response(401, "authentication_error", str(e.detail))


def _on_forbidden(_: Request[Any, Any, Any], e: PermissionDeniedException) -> Response[Any]:
    return error_response(403, "permission_error", str(e.detail))


def _on_bad_json(_: Request[Any, Any, Any], e: SerializationException) -> Response[Any]:
    return error_response(400, "invalid_request_error", "the body is not valid JSON")


async def json_body(request: Request[Any, Any, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """The body as a JSON object with no field outside ``fields`` (a misspelt or newer field is a
    400 naming it, never ignored)."""
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):  # not JSON, or not UTF-8
        raise InvalidRequest("the body is not valid JSON (UTF-8)", param="body") from None
    except RecursionError:
        raise InvalidRequest(f"the body nests deeper than {MAX_DEPTH} levels", param="body") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object", param="body")
    if _depth(body) > MAX_DEPTH:
        raise InvalidRequest(f"the body nests deeper than {MAX_DEPTH} levels", param="body")
    unknown = [k for k in body if k not in fields]
    if unknown:
        names = ", ".join(repr(k[:64]) for k in unknown[:10])
        takes = f"it takes {', '.join(fields)}" if fields else "it takes no body"
        raise InvalidRequest(f"unknown field{'s' if len(unknown) > 1 else ''} {names}: {takes}",
                             param=unknown[0][:64])
    return body


def _depth(v: Any) -> int:
    """How deep ``v`` nests, without recursion (a deep body must not exhaust the stack)."""
    deepest, todo = 0, [(v, 1)]
    while todo:
        x, d = todo.pop()
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            break
        inner = x.values() if isinstance(x, dict) else x if isinstance(x, list) else ()
        todo.extend((y, d + 1) for y in inner)
    return deepest


ADMIN_ERRORS: dict[Any, Any] = {
    Exception: on_bug, GatewayError: _on_gateway_error, StoreDown: _on_store_down, StoreSlow: _on_store_slow,
    NotAuthorizedException: _on_unauthorized, PermissionDeniedException: _on_forbidden,
    SerializationException: _on_bad_json}


async def scoped(registry: Registry, actor: Actor, f: UsageFilter) -> UsageFilter:
    """``f`` narrowed to what ``actor`` may read: its teams, and (a member) its own keys. The one
    narrowing of usage reads: /admin/usage and its records, the console's overview and latency."""
    if f.team is not None:  # refused before anything is read
        actor.check_team(f.team, "usage.read")
    if actor.teams is None:
        return f
    own_keys: list[str] | None = None  # None: a role that reads whole teams
    if actor.reach("usage.read") == OWN:
        own_keys = [k["id"] for k in await registry.keys() if actor.owns(k, "keys.read")]
    team = f.team if f.team is not None or len(actor.teams) != 1 else next(iter(actor.teams))
    if own_keys is not None and f.key is not None and f.key not in own_keys:
        raise Forbidden(f"usage.read of key {f.key[:64]!r}: not one of your keys", param="key")
    return replace(f, team=team, teams=tuple(sorted(actor.teams)),
                   keys=tuple(own_keys) if own_keys is not None else None)


def admin_router(registry: Registry, usage: UsageSource, auth: AdminAuth) -> Router:
    tokens = auth.tokens

    async def key_in_reach(actor: Actor, key_id: str, ability: str) -> dict[str, Any]:
        """The key's info, or (when it is outside the actor's teams or its own keys, or does not
        exist) a 403 that says nothing about the key beyond the id the caller sent."""
        try:
            info = await registry.key(key_id)
        except NotFound:
            if actor.teams is None:
                raise
            info = None
        if info is None or not actor.owns(info, ability):
            raise Forbidden(f"{ability} on key {key_id[:64]!r}: not one of your teams' keys"
                            if actor.reach(ability) != OWN else
                            f"{ability} on key {key_id[:64]!r}: not one of your keys", param="key_id")
        return info

    def within(actor: Actor, team: dict[str, Any], limits: Any, models: Any) -> None:
        if actor.role != "admin":
            check_within_team(team, limits, models)

    @get("/me")
    async def me(request: Request[Any, Any, Any]) -> dict[str, Any]:
        """Who the caller is: its role, teams, user, and what the role may do."""
        actor = actor_of(request)
        return actor.as_dict() | {"abilities": ROLES[actor.role]}

    @post("/keys", status_code=201)
    async def create_key(request: Request[Any, Any, Any]) -> dict[str, Any]:
        actor = actor_of(request)
        b = await json_body(request, ("team", "id", "models", "limits", "expires_at"))
        if not isinstance(b.get("team"), str):
            raise InvalidRequest("team is required (a string)", param="team")
        actor.check_team(b["team"], "keys.write")
        try:  # read once: its key policy, its limits and allow-list, the new key's team
            team = await registry.team(b["team"])
        except NotFound:
            raise NotFound(f"no team {b['team'][:64]!r}", param="team") from None
        limits, models, expires = apply_key_policy(team, b.get("limits"), b.get("models"),
                                                   b.get("expires_at"))
        within(actor, team, limits, models)
        raw, info = await registry.create_key(team, key_id=b.get("id"), models=models, limits=limits,
                                              expires_at=expires, created_by=actor.user or actor.id)
        await auth.record(request, "key.create", info["id"], after=info, teams=[info["team"]])
        return {**info, "key": raw}

    @post("/keys/{key_id:str}/rotate", status_code=201)
    async def rotate_key(key_id: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        before = await key_in_reach(actor_of(request), key_id, "keys.write")
        b = await json_body(request, ("grace_seconds",))
        raw, info = await registry.rotate(key_id, grace_seconds=b.get("grace_seconds", 0))
        await auth.record(request, "key.rotate", key_id, before=before, after=info, teams=[info["team"]])
        return {**info, "key": raw}

    @get("/keys")
    async def list_keys(request: Request[Any, Any, Any]) -> dict[str, Any]:
        actor = actor_of(request)
        return {"data": [k for k in await registry.keys() if actor.owns(k, "keys.read")]}

    @get("/keys/{key_id:str}")
    async def get_key(key_id: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        return await key_in_reach(actor_of(request), key_id, "keys.read")

    @patch("/keys/{key_id:str}")
    async def update_key(key_id: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        actor = actor_of(request)
        info = await key_in_reach(actor, key_id, "keys.write")
        b = await json_body(request, ("limits", "models", "revoked", "expires_at"))
        revoked = b.get("revoked")
        if revoked is not None and not isinstance(revoked, bool):
            raise InvalidRequest("revoked must be true or false", param="revoked")
        if actor.role != "admin":  # within its team (read once) and the key policy's longest expiry
            team = await registry.team(info["team"])
            check_within_team(team, b.get("limits"), b.get("models", UNSET))
            if "expires_at" in b:
                apply_key_policy(team, {}, None, b["expires_at"])
        after = await registry.update_key(key_id, limits=b.get("limits"), models=b.get("models", UNSET),
                                          revoked=revoked, expires_at=b.get("expires_at", UNSET))
        await auth.record(request, "key.update", key_id, before=info, after=after, teams=[info["team"]])
        return after

    async def revoke(key_id: str, request: Request[Any, Any, Any]) -> dict[str, Any]:
        await json_body(request, ())
        before = await key_in_reach(actor_of(request), key_id, "keys.write")
        after = await registry.revoke(key_id)
        await auth.record(request, "key.revoke", key_id, before=before, after=after, teams=[after["team"]])
        return after

    @delete("/keys/{key_id:str}", status_code=200)
    async def revoke_key(key_id: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        return await revoke(key_id, request)

    @post("/keys/{key_id:str}/revoke", status_code=200)
    async def revoke_key_post(key_id: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        return await revoke(key_id, request)

    @get("/teams")
    async def list_teams(request: Request[Any, Any, Any]) -> dict[str, Any]:
        actor = actor_of(request)
        return {"data": [await registry.team(t) for t in await registry.team_names() if actor.sees(t)]}

    @get("/teams/{name:str}")
    async def get_team(name: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        actor_of(request).check_team(name, "teams.read")
        return await registry.team(name)

    @put("/teams/{name:str}")
    async def put_team(name: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        actor_of(request).check_team(name, "teams.write")
        b = await json_body(request, ("limits", "models", "model_limits", "end_user_limits", "tag_limits"))
        try:
            before: dict[str, Any] | None = await registry.team(name)
        except NotFound:
            before = None
        after = await registry.update_team(name, limits=b.get("limits"), models=b.get("models", UNSET),
                                           model_limits=b.get("model_limits"),
                                           end_user_limits=b.get("end_user_limits", UNSET),
                                           tag_limits=b.get("tag_limits"))
        await auth.record(request, "team.update", name, before=before, after=after, teams=[name])
        return after

    @patch("/teams/{name:str}")
    async def patch_team(name: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        return await put_team.fn(name, request)

    @put("/teams/{name:str}/key_policy")
    async def put_key_policy(name: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        """The team's key policy (``Registry.set_key_policy``); a team admin's defaults stay within
        the team's limits and allow-list."""
        actor = actor_of(request)
        actor.check_team(name, "policy.write")
        b = await json_body(request, ("defaults", "max_expiry_days", "models"))
        team = await registry.team(name)
        if isinstance(b.get("defaults"), dict):
            within(actor, team, b["defaults"], b.get("models", UNSET))
        elif "models" in b:
            within(actor, team, None, b["models"])
        before = team["key_policy"]
        after = await registry.set_key_policy(name, b)
        await auth.record(request, "team.key_policy", name, before=before, after=after["key_policy"],
                          teams=[name])
        return after

    @get("/usage")
    async def get_usage(request: Request[Any, Any, Any]) -> Response[Any]:
        f = await scoped(registry, actor_of(request), parse_filter(request.query_params))
        body = await usage.query(f) | {"source": usage.source}
        if f.csv:
            cols = [*f.group_by, *(body["total"].keys())]
            return Response(to_csv(body["data"], cols), media_type="text/csv")
        return Response(body)

    @get("/usage/records")
    async def get_records(request: Request[Any, Any, Any]) -> Response[Any]:
        f = await scoped(registry, actor_of(request), parse_filter(request.query_params, records=True))
        body = await usage.records(f) | {"source": usage.source}
        if f.csv:
            return Response(to_csv(body["data"], list(RECORD_FIELDS)), media_type="text/csv")
        return Response(body)

    @post("/tokens", status_code=201)
    async def create_token(request: Request[Any, Any, Any]) -> dict[str, Any]:
        """An admin API token: shown this once, kept as a hash. A team admin makes tokens for its
        own teams only, and never an admin one."""
        actor = actor_of(request)
        b = await json_body(request, ("role", "teams", "user", "expires_at"))
        if actor.role != "admin" and b.get("role") == "admin":
            raise Forbidden("only an admin may create an admin token", param="role")
        if actor.teams is not None:
            teams = b.get("teams")
            if not isinstance(teams, list) or not teams:
                raise Forbidden("teams: name the teams (yours) the token covers", param="teams")
            for t in teams:
                actor.check_team(t, "tokens.write")
        token, info = await tokens.create(b, created_by=actor.id)
        await auth.record(request, "token.create", info["id"], after=info, teams=info["teams"])
        return {**info, "token": token}

    def token_visible(actor: Actor, info: dict[str, Any]) -> bool:
        return actor.teams is None or (info["teams"] is not None and set(info["teams"]) <= actor.teams)

    @get("/tokens")
    async def list_tokens(request: Request[Any, Any, Any]) -> dict[str, Any]:
        actor = actor_of(request)
        return {"data": [t for t in await tokens.list() if token_visible(actor, t)]}

    @delete("/tokens/{token_id:str}", status_code=200)
    async def revoke_token(token_id: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        actor = actor_of(request)
        try:
            info = tokens.info(await tokens.get(token_id))
        except NotFound:
            if actor.teams is None:
                raise
            info = None
        if info is None or not token_visible(actor, info):
            raise Forbidden(f"tokens.write on token {token_id[:64]!r}: not one of your teams' tokens",
                            param="token_id")
        after = await tokens.revoke(token_id)
        await auth.record(request, "token.revoke", token_id, before=info, after=after, teams=after["teams"])
        return after

    @get("/audit")
    async def get_audit(request: Request[Any, Any, Any]) -> dict[str, Any]:
        """The audit trail, newest first (``switchyard.policies.audit``); GET only: no API
        changes or removes an entry."""
        return await auth.audit.read(request.query_params, actor_of(request).teams)

    return Router(
        path="/admin", guards=[auth.guard],
        route_handlers=[me, create_key, rotate_key, list_keys, get_key, update_key, revoke_key,
                        revoke_key_post, list_teams, get_team, put_team, patch_team, put_key_policy,
                        get_usage, get_records,
                        create_token, list_tokens, revoke_token, get_audit],
        exception_handlers=ADMIN_ERRORS,
    )
