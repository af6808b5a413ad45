"""/admin: keys, teams and usage, guarded by the master key (``Authorization: Bearer <master_key>``)
or a console session (``switchyard.http.admin_auth``)."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from litestar import Request, Response, Router, delete, get, patch, post, put
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException, SerializationException
from litestar.params import FromPath

from switchyard.core.errors import GatewayError, InvalidRequest
from switchyard.dialects.errors import openai_error
from switchyard.http.admin_auth import AdminAuth
from switchyard.policies.registry import UNSET, Registry
from switchyard.policies.store import StoreDown, StoreSlow, UsageRecord
from switchyard.policies.usage import UsageSource
from switchyard.policies.usage_filter import parse_filter, to_csv

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


def admin_router(registry: Registry, usage: UsageSource, auth: AdminAuth) -> Router:

    @post("/keys", status_code=201)
    async def create_key(request: Request[Any, Any, Any]) -> dict[str, Any]:
        b = await json_body(request, ("team", "id", "models", "limits", "expires_at"))
        if not isinstance(b.get("team"), str):
            raise InvalidRequest("team is required (a string)", param="team")
        raw, info = await registry.create_key(b["team"], key_id=b.get("id"), models=b.get("models"),
                                              limits=b.get("limits"), expires_at=b.get("expires_at"))
        return {**info, "key": raw}

    @post("/keys/{key_id:str}/rotate", status_code=201)
    async def rotate_key(key_id: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        b = await json_body(request, ("grace_seconds",))
        raw, info = await registry.rotate(key_id, grace_seconds=b.get("grace_seconds", 0))
        return {**info, "key": raw}

    @get("/keys")
    async def list_keys() -> dict[str, Any]:
        return {"data": await registry.keys()}

    @get("/keys/{key_id:str}")
    async def get_key(key_id: FromPath[str]) -> dict[str, Any]:
        return await registry.key(key_id)

    @patch("/keys/{key_id:str}")
    async def update_key(key_id: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        b = await json_body(request, ("limits", "models", "revoked", "expires_at"))
        revoked = b.get("revoked")
        if revoked is not None and not isinstance(revoked, bool):
            raise InvalidRequest("revoked must be true or false", param="revoked")
        return await registry.update_key(key_id, limits=b.get("limits"), models=b.get("models", UNSET),
                                         revoked=revoked, expires_at=b.get("expires_at", UNSET))

    @delete("/keys/{key_id:str}", status_code=200)
    async def revoke_key(key_id: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        await json_body(request, ())
        return await registry.revoke(key_id)

    @post("/keys/{key_id:str}/revoke", status_code=200)
    async def revoke_key_post(key_id: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        await json_body(request, ())
        return await registry.revoke(key_id)

    @get("/teams")
    async def list_teams() -> dict[str, Any]:
        return {"data": await registry.teams()}

    @get("/teams/{name:str}")
    async def get_team(name: FromPath[str]) -> dict[str, Any]:
        return await registry.team(name)

    @put("/teams/{name:str}")
    async def put_team(name: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        b = await json_body(request, ("limits", "models", "model_limits"))
        return await registry.update_team(name, limits=b.get("limits"), models=b.get("models", UNSET),
                                          model_limits=b.get("model_limits"),
                                          end_user_limits=b.get("end_user_limits", UNSET),
                                          tag_limits=b.get("tag_limits"))

    @patch("/teams/{name:str}")
    async def patch_team(name: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
        return await put_team.fn(name, request)

    @get("/usage")
    async def get_usage(request: Request[Any, Any, Any]) -> Response[Any]:
        f = parse_filter(request.query_params)
        body = await usage.query(f) | {"source": usage.source}
        if f.csv:
            cols = [*f.group_by, *(body["total"].keys())]
            return Response(to_csv(body["data"], cols), media_type="text/csv")
        return Response(body)

    @get("/usage/records")
    async def get_records(request: Request[Any, Any, Any]) -> Response[Any]:
        f = parse_filter(request.query_params, records=True)
        body = await usage.records(f) | {"source": usage.source}
        if f.csv:
            return Response(to_csv(body["data"], list(RECORD_FIELDS)), media_type="text/csv")
        return Response(body)

    return Router(
        path="/admin", guards=[auth.guard],
        route_handlers=[create_key, rotate_key, list_keys, get_key, update_key, revoke_key, revoke_key_post,
                        list_teams, get_team, put_team, patch_team, get_usage, get_records],
        exception_handlers=ADMIN_ERRORS,
    )

