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
    RequestBody,
    Schema,
)

from gateway.dialects.spec import BOOL, INT, LIST, NUMBER, OBJECT, STR, Dialect, Param

_TYPES = {NUMBER: OpenAPIType.NUMBER, INT: OpenAPIType.INTEGER, BOOL: OpenAPIType.BOOLEAN,
          STR: OpenAPIType.STRING, LIST: OpenAPIType.ARRAY, OBJECT: OpenAPIType.OBJECT}


def param_schema(p: Param) -> Schema:
    return Schema(type=_TYPES.get(p.type), minimum=p.ge, maximum=p.le, exclusive_minimum=p.gt,
                  exclusive_maximum=p.lt, enum=list(p.choices) if p.choices else None,
                  max_items=p.max_items, description=f"canonical: {p.to.split('.')[0]}")


def dialect_schema(dialects: list[Dialect]) -> Schema:
    props: dict[str, Schema] = {}
    for d in dialects:
        for p in d.params:
            props.setdefault(p.name, param_schema(p))
    return Schema(type=OpenAPIType.OBJECT, properties=props, required=["model"])


def add_completion_paths(schema: OpenAPI, endpoints: dict[str, tuple[str, list[Dialect]]]) -> None:
    """``endpoints``: path -> (summary, the dialects it reads)."""
    ok = OpenAPIResponse(description="The answer in the caller's dialect (JSON, or SSE when stream)")
    for path, (summary, dialects) in endpoints.items():
        body = RequestBody(required=True, content={
            "application/json": OpenAPIMediaType(schema=dialect_schema(dialects))})
        op = Operation(summary=summary, request_body=body, responses={"200": ok},
                       operation_id="post" + path.replace("/", "_"))
        (schema.paths or {})[path] = PathItem(post=op)
