"""OpenAPI entries for the raw ASGI completion endpoints, derived from the dialect tables: each
parameter with its type, range and allowed values, so the schema cannot drift from the code."""

from __future__ import annotations

from litestar.openapi.spec import (
    OpenAPI,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    PathItem,
    Reference,
    RequestBody,
    Schema,
)

from switchyard.dialects.spec import (
    BOOL,
    BOOL_OR_INT,
    INT,
    LIST,
    NUMBER,
    OBJECT,
    STR,
    STR_OR_LIST,
    Dialect,
    Param,
)

_TYPES: dict[tuple[type, ...], OpenAPIType | list[OpenAPIType]] = {
    NUMBER: OpenAPIType.NUMBER, INT: OpenAPIType.INTEGER, BOOL: OpenAPIType.BOOLEAN,
    STR: OpenAPIType.STRING, LIST: OpenAPIType.ARRAY, OBJECT: OpenAPIType.OBJECT,
    BOOL_OR_INT: [OpenAPIType.BOOLEAN, OpenAPIType.INTEGER],
    STR_OR_LIST: [OpenAPIType.STRING, OpenAPIType.ARRAY]}


def param_schema(p: Param) -> Schema:
    return Schema(type=_TYPES.get(p.type), minimum=p.ge, maximum=p.le, exclusive_minimum=p.gt,
                  exclusive_maximum=p.lt, enum=list(p.choices) if p.choices else None,
                  max_items=p.max_items, description=f"canonical: {p.to.split('.')[0]}")


def dialect_schema(dialects: list[Dialect], models: list[str] | None = None) -> Schema:
    props: dict[str, Schema | Reference] = {}
    for d in dialects:
        for p in d.params:
            props.setdefault(p.name, param_schema(p))
        for name in d.prepared:
            props.setdefault(name, Schema(description="read by the dialect's own pass (docs/dialects.md)"))
    if models and "model" in props:
        model = props["model"]
        assert isinstance(model, Schema)
        model.examples = list(models)  # the configured names (wildcards take any)
    return Schema(type=OpenAPIType.OBJECT, properties=props, required=["model"])


_ERROR = Schema(type=OpenAPIType.OBJECT, description="OpenAI's error shape (FastAPI's detail list for "
                "the 422 of the dialects that document it)", properties={"error": Schema(
                    type=OpenAPIType.OBJECT, properties={
                        "message": Schema(type=OpenAPIType.STRING),
                        "type": Schema(type=OpenAPIType.STRING),
                        "param": Schema(type=OpenAPIType.STRING, description="the parameter at fault, "
                                        "by the caller's name for it"),
                        "code": Schema(type=OpenAPIType.STRING)})})
ERRORS = {
    "400": "A parameter is missing, of the wrong type or out of range (named in error.param)",
    "401": "Missing or invalid API key",
    "403": "The key may not use this model",
    "404": "No such model",
    "408": "The request body did not arrive in time",
    "413": "The request body is larger than server.max_body_bytes",
    "415": "The body is not uncompressed JSON",
    "422": "Validation error in FastAPI's shape (dialects that document it)",
    "429": "A limit or quota refused the request (Retry-After and x-ratelimit-* headers)",
    "502": "The upstream failed or could not be reached (the message names the deployment)",
    "503": "The model is loading, every deployment is cooling down, or the policy store is down",
    "504": "The request's deadline or the upstream's timeout ran out",
}


def add_completion_paths(schema: OpenAPI, endpoints: dict[str, tuple[str, list[Dialect]]],
                         models: list[str] | None = None) -> None:
    """``endpoints``: path -> (summary, the dialects it reads); ``models``: configured names."""
    ok = OpenAPIResponse(description="The answer in the caller's dialect (JSON, or SSE when stream)")
    errors = {status: OpenAPIResponse(description=text, content={
        "application/json": OpenAPIMediaType(schema=_ERROR)}) for status, text in ERRORS.items()}
    for path, (summary, dialects) in endpoints.items():
        body = RequestBody(required=True, content={
            "application/json": OpenAPIMediaType(schema=dialect_schema(dialects, models))})
        op = Operation(summary=summary, request_body=body, responses={"200": ok, **errors},
                       operation_id="post" + path.replace("/", "_"))
        (schema.paths or {})[path] = PathItem(post=op)


_MODEL = Schema(type=OpenAPIType.OBJECT, required=["id", "object", "created", "owned_by", "mode"],
                properties={
    "id": Schema(type=OpenAPIType.STRING, description="the name to send as model"),
    "object": Schema(type=OpenAPIType.STRING, enum=["model"]),
    "created": Schema(type=OpenAPIType.INTEGER),
    "owned_by": Schema(type=OpenAPIType.STRING, description="the name's vendor part"),
    "mode": Schema(type=OpenAPIType.STRING, enum=["chat", "embedding"], description=(
        "embedding: served on /v1/embeddings only; chat: the text endpoints (models[].mode, else "
        "implied by the deployments and names). Beyond OpenAI's model object, as LiteLLM's "
        "model_info.mode; the openai SDK keeps it in model_extra"))})


def document_models(schema: OpenAPI) -> None:
    """The answer of ``GET /v1/models`` (a plain handler: Litestar cannot see its shape)."""
    op = (schema.paths or {})["/v1/models"].get
    assert op is not None and op.responses is not None
    op.responses["200"] = OpenAPIResponse(
        description="The models the caller's key may use (wildcard routes are not listed)",
        content={"application/json": OpenAPIMediaType(schema=Schema(
            type=OpenAPIType.OBJECT, required=["object", "data"], properties={
                "object": Schema(type=OpenAPIType.STRING, enum=["list"]),
                "data": Schema(type=OpenAPIType.ARRAY, items=_MODEL)}))})
