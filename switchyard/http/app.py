"""The HTTP surface. Handlers are thin on purpose: raw bytes in, bytes or a stream out; every
decision lives in ``switchyard.gateway.pipeline.Gateway``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, get
from litestar.exceptions import HTTPException
from litestar.openapi import OpenAPIConfig
from litestar.params import FromPath
from litestar.types import ControllerRouterHandler

from switchyard.core.config import Config
from switchyard.core.errors import GatewayError, NotFound, PayloadTooLarge
from switchyard.dialects.anthropic.request import ANTHROPIC, read_request
from switchyard.dialects.chat import CHAT
from switchyard.dialects.embeddings import EMBEDDINGS
from switchyard.dialects.errors import error_bytes
from switchyard.dialects.fireworks import FIREWORKS
from switchyard.dialects.llamacpp import LLAMACPP, LLAMACPP_NATIVE
from switchyard.dialects.mistralrs import MISTRALRS
from switchyard.dialects.openai import OPENAI, VLLM
from switchyard.dialects.passthrough import check_config
from switchyard.dialects.responses import RESPONSES
from switchyard.dialects.sgp import SGP
from switchyard.dialects.spec import Dialect
from switchyard.gateway.pipeline import Gateway
from switchyard.gateway.types import Endpoint
from switchyard.http.access import AccessLog
from switchyard.http.admin import admin_router, error_response, on_bug
from switchyard.http.admin_auth import AdminAuth, Failures, Proxies
from switchyard.http.asgi import Switchyard, endpoint_app, error_shape
from switchyard.http.console import console_routes
from switchyard.http.logs import settings as log_settings
from switchyard.http.oidc import Oidc
from switchyard.http.openapi import add_completion_paths, document_models
from switchyard.http.scrape import CONTENT_TYPE, Exporter
from switchyard.http.sessions import Sessions
from switchyard.http.version import package_version
from switchyard.policies.factory import Policies, build_policies
from switchyard.policies.store import StoreDown
from switchyard.routing import Router

COMPLETIONS = Endpoint("completion", None)
FIREWORKS_COMPLETIONS = Endpoint("completion", FIREWORKS)
SGP_COMPLETIONS = Endpoint("completion", SGP)
SGP_CHAT = Endpoint("chat", CHAT, renderer="sgp_chat")
SGP_V5_COMPLETIONS = Endpoint("completion", SGP, renderer="sgp_v5")
SGP_V5_CHAT = Endpoint("chat", CHAT, renderer="sgp_v5_chat")
LLAMACPP_COMPLETION = Endpoint("completion", LLAMACPP_NATIVE, renderer="llamacpp_native",
                               model_optional=True)
CHAT_COMPLETIONS = Endpoint("chat", CHAT)
MESSAGES = Endpoint("chat", ANTHROPIC, read=read_request)
COUNT_TOKENS = Endpoint("chat", ANTHROPIC, read=read_request, counts=True)
RESPONSES_CREATE = Endpoint("chat", RESPONSES, renderer="responses")
EMBEDDINGS_CREATE = Endpoint("embedding", EMBEDDINGS, renderer="embeddings")
SETTLE_AFTER_CUT = 5.0  # seconds that requests cut at shutdown may take to settle

log = logging.getLogger("switchyard")
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


# The completion endpoints: path -> (endpoint, OpenAPI summary, the dialects its body may speak).
HOT: dict[str, tuple[Endpoint, str, list[Dialect]]] = {
    "/v1/completions": (COMPLETIONS, "Completions: OpenAI, llama.cpp, mistral.rs, vLLM, SGP bodies "
                        "(told by their fields or the x-switchyard-dialect header)",
                        [OPENAI, VLLM, LLAMACPP, MISTRALRS]),
    "/inference/v1/completions": (FIREWORKS_COMPLETIONS, "Completions: Fireworks AI", [FIREWORKS]),
    "/v4/beta/completions": (SGP_COMPLETIONS, "Completions: Scale GenAI Platform", [SGP]),
    "/v4/beta/chat/completions": (SGP_CHAT, "Chat completions: Scale GenAI Platform (scale-gp)", [CHAT]),
    "/v5/completions": (SGP_V5_COMPLETIONS, "Completions: Scale GenAI Platform v5 (scale-gp-beta)", [SGP]),
    "/v5/chat/completions": (SGP_V5_CHAT, "Chat completions: Scale GenAI Platform v5 (scale-gp-beta)",
                             [CHAT]),
    "/completion": (LLAMACPP_COMPLETION, "llama.cpp native completion", [LLAMACPP_NATIVE]),
    "/v1/chat/completions": (CHAT_COMPLETIONS, "Chat completions", [CHAT]),
    "/inference/v1/chat/completions": (CHAT_COMPLETIONS, "Chat completions (Fireworks path)", [CHAT]),
    "/v1/messages": (MESSAGES, "Anthropic Messages (x-api-key or Bearer; anthropic-version and "
                     "anthropic-beta read; ?beta=true accepted); errors in Anthropic's shape", [ANTHROPIC]),
    "/v1/messages/count_tokens": (COUNT_TOKENS, "Anthropic Messages token count: {\"input_tokens\": N} "
                                  "(the engine's tokenizer, else the gateway's estimate)", [ANTHROPIC]),
    "/v1/responses": (RESPONSES_CREATE, "OpenAI Responses, stateless: answered by any backend through "
                      "chat; nothing is stored", [RESPONSES]),
    "/v1/embeddings": (EMBEDDINGS_CREATE, "Embeddings: OpenAI-family, Gemini, Vertex, Bedrock and "
                       "Cohere upstreams and the built-in embedder", [EMBEDDINGS]),
}


def create_app(config: Config, *, router: Router | None = None,
               policies: Policies | None = None) -> Switchyard:
    check_config(config)
    router = router or Router(config)
    policies = policies or build_policies(config)
    router.use_store(policies.store)  # the usage strategy counts where the limits are counted
    gw = Gateway(config, router, policies)
    auth = AdminAuth(config.master_key, Sessions(policies.store),  # /admin, /ui and /metrics
                     failures=Failures(config.server.auth_max_failures, config.server.auth_failure_window),
                     proxies=Proxies(config.server.trusted_proxies), audit=policies.audit,
                     oidc=Oidc(config.console.oidc, policies.store) if config.console.oidc else None,
                     master_key_login=config.console.master_key_login)

    @get("/v1/models")
    async def models(request: Request[Any, Any, Any]) -> Response[Any]:
        """The models the caller's key may use."""
        try:
            principal = await gw.authenticate(request.headers)
        except GatewayError as e:
            status, body = error_bytes("openai", e)
            return Response(body, status_code=status, headers=e.headers, media_type="application/json")
        data = [{"id": name, "object": "model", "created": 0, "owned_by": name.split("/")[0],
                 "mode": m.listed_mode}  # an extra field: the openai SDK keeps it (model_extra)
                for m in config.models
                for name in (m.name, *m.aliases)
                if principal.may_use(m.name) and not name.endswith("*")]
        return Response(msgspec.json.encode({"object": "list", "data": data}),
                        media_type="application/json")

    @get("/v1/responses/{response_id:str}")
    async def stored_response(request: Request[Any, Any, Any], response_id: FromPath[str]) -> Response[Any]:
        """Responses are not stored (the Responses API here is stateless): 404 to any key."""
        err: GatewayError = NotFound("responses are not stored by this gateway (its Responses API is "
                                     "stateless)", param="response_id")
        try:
            await gw.authenticate(request.headers)
        except GatewayError as e:
            err = e
        status, body = error_bytes("responses", err)
        return Response(body, status_code=status, headers=err.headers, media_type="application/json")

    @get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    fail_closed = any(d.on_store_error == "closed" for m in config.models for d in m.deployments)

    @get("/ready")
    async def ready() -> Response[Any]:
        """503 naming what is not ready: a model that failed to load (with its cause) or is still
        loading, or the policy store out of reach while some deployment fails closed (its
        requests would all get 503)."""
        problems = []
        waiting = [t for t in router.targets if not t.backend.ready]
        failed = [f"{t.name} ({why})" for t in waiting if (why := router.load_error(t))]
        loading = [t.name for t in waiting if not router.load_error(t)]
        if failed:
            problems.append("model failed to load: " + ", ".join(failed))
        if loading:
            problems.append("model is loading: " + ", ".join(loading))
        if fail_closed:
            try:
                await policies.store.ping()
            except StoreDown as e:
                problems.append(f"the policy store is unreachable ({e})")
        if problems:
            return Response({"status": "not ready", "message": "; ".join(problems)}, status_code=503,
                            headers={"retry-after": "1"})
        return Response({"status": "ready"})

    def http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
        shape = error_shape(request.url.path)
        if exc.status_code != 413:
            if shape == "chat":
                return error_response(exc.status_code, "invalid_request_error", exc.detail)
            err: GatewayError = GatewayError(exc.detail, status=exc.status_code)
        else:
            err = PayloadTooLarge(f"request body exceeds the limit of {config.server.max_body_bytes} bytes",
                                  param="body")
        status, body = error_bytes(shape, err)
        return Response(body, status_code=status, media_type="application/json")

    exporter = Exporter(gw, auth) if config.metrics.enabled else None
    if exporter is not None and config.metrics.token is None and config.server.host not in LOOPBACK:
        log.warning("/metrics is open (no metrics.token) on %s: its labels name teams, deployments and "
                    "models; set metrics.token unless only your scraper can reach this port",
                    config.server.host)
    if exporter is not None:
        gw.observers.append(exporter.recorder.observe)
    access = AccessLog(log_settings(None, None, config.logging.level, config.logging.format)[1]) \
        if config.logging.access else None
    if access is not None:
        gw.observers.append(access.observe)
    if config.tracing.otlp_endpoint is not None:
        from switchyard.http.tracing import Tracing  # the otel extra: only imported when configured

        gw.tracing = Tracing(config.tracing, package_version())
        gw.observers.append(gw.tracing.end)
    handlers: list[ControllerRouterHandler] = [
        models, stored_response, health, ready, admin_router(policies.registry, policies.usage, auth),
        *console_routes(gw, router, policies, auth)]
    if exporter is not None:

        @get("/metrics", include_in_schema=False)
        async def metrics(request: Request[Any, Any, Any]) -> Response[Any]:
            """Prometheus text format (docs/observability.md)."""
            assert exporter is not None
            if not exporter.allowed(request.headers.get("authorization")):
                return error_response(401, "authentication_error",
                                      "send Authorization: Bearer <metrics.token>")
            return Response(await exporter.render(), media_type=CONTENT_TYPE)

        handlers.append(metrics)

    async def startup() -> None:
        await router.start()
        await policies.start()
        if exporter is not None:
            exporter.start()
        add_completion_paths(app.openapi_schema, {path: (summary, dialects)
                                                  for path, (_, summary, dialects) in HOT.items()},
                             [n for m in config.models for n in (m.name, *m.aliases)])
        document_models(app.openapi_schema)

    async def shutdown() -> None:
        # Requests that shutdown_grace cut are still settling (a 503 or error event to send, usage
        # to record): the store and the pools stay open for them, a few seconds at most.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(gw.drain(), SETTLE_AFTER_CUT)
        await router.aclose()
        await policies.aclose()
        await gw.webhooks.aclose()
        if auth.oidc is not None:
            await auth.oidc.aclose()
        if exporter is not None:
            await exporter.aclose()
        if access is not None:
            access.flush()
        if gw.tracing is not None:
            gw.tracing.shutdown()

    app = Litestar(
        route_handlers=handlers,
        on_startup=[startup], on_shutdown=[shutdown],
        exception_handlers={HTTPException: http_error, Exception: on_bug},
        openapi_config=OpenAPIConfig(title="Switchyard", version=package_version(), path="/schema"),
        request_max_body_size=config.server.max_body_bytes,
        debug=False,
        logging_config=None,  # Litestar's default logs at INFO through a queue: a cost per request
    )
    app.state.gateway = gw
    app.state.exporter = exporter
    return Switchyard(app, {path: endpoint_app(gw, ep, path) for path, (ep, _, _) in HOT.items()}, gw, access)
