"""Bounded fuzzing through the HTTP surface: random types, sizes and encodings for every field of
every completion endpoint (hypothesis), every operation of the OpenAPI document (schemathesis),
and hostile bytes: invalid UTF-8, NaN/Infinity/1e400, 10k-deep nesting, duplicate keys, wrong
content types, CR/LF/NUL in field names and header values.

Every answer must be below 500, on a connection the server did not drop, within the timeout, and
every 4xx must name the parameter at fault by the caller's own name for it."""

from __future__ import annotations

import json
import re
import socket
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from switchyard.http.app import HOT
from switchyard.http.openapi import add_completion_paths
from tests.fuzz.conftest import KEY, MASTER, SECRETS, Live, fuzz_config

MODELS = ["v/openai", "v/sgp", "v/llama", "v/anything"]
# Names an error may blame that are not body fields: the body itself, a header, a path part.
_NOT_FIELDS = {"body", "headers", "content-type", "content-encoding", "authorization", "x-api-key",
               "x-switchyard-dialect", "x-request-id", "anthropic-version"}
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _params(path: str) -> list[str]:
    dialects = HOT[path][2]
    return sorted({p.name for d in dialects for p in d.params} | {n for d in dialects for n in d.prepared})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=15)
hostile_names = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=12) | st.sampled_from(
    ["a\r\nx-evil: 1", "nul\x00", "caf\u00e9\u2603", "\ud7ff", " "])


# Responses input items: each kind with fields of any type (and the odd unknown kind).
_ITEM_KINDS = ["message", "function_call", "function_call_output", "reasoning", "item_reference",
               "custom_tool_call", "web_search_call", "nonsense"]
response_items = st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(_ITEM_KINDS)},
    optional={"role": st.sampled_from(["user", "developer", "assistant", "robot"]) | json_values,
              "content": json_values | st.lists(st.fixed_dictionaries(
                  {"type": st.sampled_from(["input_text", "output_text", "input_image", "x"]),
                   "text": json_values}), max_size=3),
              "call_id": json_values, "name": json_values, "arguments": json_values, "output": json_values}),
    max_size=4)
response_tools = st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(["function", "web_search", "namespace", "mcp"]) | json_values},
    optional={"name": json_values, "parameters": json_values}), max_size=3)
# Anthropic content blocks: every documented type, with fields of random types and shapes.
_BLOCK_FIELDS = ["text", "source", "id", "name", "input", "tool_use_id", "content", "cache_control",
                 "title", "is_error", "citations", "thinking", "signature"]
_SOURCES = st.fixed_dictionaries({"type": st.sampled_from(["base64", "url", "text", "content", "file"])},
                                 optional={k: json_values for k in ("media_type", "data", "url", "content")})
blocks = st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image", "document", "tool_use", "tool_result", "thinking",
                              "redacted_thinking", "server_tool_use", "search_result"]) | json_values},
    optional={**{k: json_values for k in _BLOCK_FIELDS}, "source": _SOURCES | json_values}), max_size=4)


def bodies(path: str) -> st.SearchStrategy[dict[str, Any]]:
    fields = st.dictionaries(st.sampled_from(_params(path)) | hostile_names, json_values, max_size=6)
    base = st.fixed_dictionaries({"model": st.sampled_from(MODELS) | json_values})
    if path.startswith("/v1/messages"):
        turns = st.lists(st.fixed_dictionaries({
            "role": st.sampled_from(["user", "assistant", "system"]) | json_values,
            "content": blocks | json_values}), max_size=3)
        content = st.fixed_dictionaries({"max_tokens": st.integers(-2, 64) | json_values, "messages": turns},
                                        optional={"system": blocks | json_values})
    elif "chat" in path:
        content = st.fixed_dictionaries({"messages": st.lists(st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "system", "assistant", "tool"]), "content": json_values}),
            max_size=3)})
    elif path == "/v1/responses":
        content = st.fixed_dictionaries({"input": json_values | response_items},
                                        optional={"tools": response_tools})
    elif path == "/v1/embeddings":
        content = st.fixed_dictionaries({"input": json_values | st.lists(
            st.lists(st.integers(min_value=-5, max_value=2**40), max_size=4), max_size=3)})
    else:
        content = st.fixed_dictionaries({"prompt": json_values})
    return st.tuples(base, content, fields).map(lambda t: {**t[0], **t[1], **t[2]})


def blamed(resp: httpx.Response) -> str | None:
    body = resp.json()
    if body.get("type") == "error":  # Anthropic's shape: the message leads with the field at fault
        lead = re.match(r"[A-Za-z_][\w.\[\]-]*", body["error"]["message"])
        return lead.group(0) if lead else None
    if "detail" in body:
        return ".".join(str(x) for x in body["detail"][0]["loc"][1:]) or "body"
    err = body.get("error")
    if isinstance(err, dict):
        return err.get("param")
    return body.get("param")


def check(resp: httpx.Response, path: str, sent: dict[str, Any] | None,
          headers: dict[str, str] | None = None) -> None:
    assert resp.status_code < 500, (resp.status_code, resp.text[:500])
    for secret in SECRETS:
        assert secret not in resp.text and secret not in str(resp.headers)
    if resp.status_code in (400, 404, 413, 415, 422):
        param = blamed(resp)
        assert param, resp.text
        head = param.split(".")[0].split("[")[0]
        # The caller's vocabulary: what it sent, the endpoint's documented fields, headers.
        names = (set(sent or {}) | set(_params(path)) | {h.lower() for h in headers or {}} | _NOT_FIELDS
                 | {"response_id"})
        assert head in names or param in names, (param, sorted(names), resp.text[:300])


@pytest.fixture
def client(live: Live) -> httpx.Client:
    with httpx.Client(base_url=live.url, timeout=10, headers={"authorization": f"Bearer {KEY}"}) as c:
        yield c  # type: ignore[misc]


@pytest.mark.parametrize("path", sorted(HOT))
def test_random_bodies(client: httpx.Client, path: str) -> None:
    @FUZZ
    @given(body=bodies(path), stream=st.booleans(),
           version=st.sampled_from(["2023-06-01", "2026-10-21", "", "bogus"]))
    def run(body: dict[str, Any], stream: bool, version: str) -> None:
        if stream and isinstance(body, dict):
            body = {**body, "stream": True}
        raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
        headers = {"content-type": "application/json", "anthropic-version": version}
        check(client.post(path, content=raw, headers=headers), path, body)

    run()


HOSTILE_BYTES = [
    b'{"model": "v/openai", "prompt": "\xff\xfe\xfa"}',
    b'{"model": "v/openai", "prompt": "hi", "temperature": NaN}',
    b'{"model": "v/openai", "prompt": "hi", "temperature": Infinity}',
    b'{"model": "v/openai", "prompt": "hi", "temperature": 1e400}',
    b'{"model": "v/openai", "prompt": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
    b'{"model": "v/openai", "prompt": ' + b'{"a":' * 10_000 + b"1" + b"}" * 10_000 + b"}",
    b'{"model": "v/openai", "model": "v/sgp", "prompt": "hi", "max_tokens": 1}',
    b'{"model": "v/openai", "prompt": "\\ud800"}',
    b"",
    b"null",
    b"[1, 2]",
    b'"just a string"',
]


@pytest.mark.parametrize("path", sorted(HOT))
@pytest.mark.parametrize("raw", HOSTILE_BYTES, ids=[f"bytes{i}" for i in range(len(HOSTILE_BYTES))])
def test_hostile_bytes(client: httpx.Client, path: str, raw: bytes) -> None:
    check(client.post(path, content=raw, headers={"content-type": "application/json"}), path, None)


@pytest.mark.parametrize("headers", [
    {"content-type": "application/json", "content-encoding": "gzip"},
    {"content-type": "multipart/form-data; boundary=x"},
    {"content-type": "application/json", "x-switchyard-dialect": "caf\u00e9"},
    {"content-type": "application/json", "x-request-id": "\u00ff" * 300},
    {"content-type": "application/json", "x-api-key": "x\x7fy"},
    {"content-type": "application/json", "inference_extra_headers": "a"},
])
def test_hostile_headers(client: httpx.Client, headers: dict[str, str]) -> None:
    body = {"model": "v/openai", "prompt": "hi", "max_tokens": 1}
    raw = [(k.encode(), v.encode("latin-1", "replace")) for k, v in headers.items()]
    r = client.post("/v1/completions", content=json.dumps(body).encode(), headers=raw)
    check(r, "/v1/completions", body, headers)


@pytest.mark.parametrize("line", [b"x-extra: a\x00b", b"x-extra: a\rb", b"x-\xff: 1", b"bad header",
                                  b"authorization: Bearer " + KEY.encode() + b"\x00"])
def test_raw_header_bytes_get_a_json_400(live: Live, line: bytes) -> None:
    """What HTTP clients refuse to send: the server's parser answers, in the gateway's shape."""
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n" + line + b"\r\ncontent-length: 2\r\n\r\n{}")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), data[:200]
    assert json.loads(body)["error"]["param"] == "headers"
    assert KEY.encode() not in data


@FUZZ
@given(value=st.text(alphabet=st.characters(codec="utf-8"), max_size=30),
       name=st.text(alphabet=st.characters(codec="latin-1", exclude_categories=("Cc",)), min_size=1,
                    max_size=15))
def test_extra_headers_values_and_names(live: Live, value: str, name: str) -> None:
    body = {"model": "v/sgp", "prompt": "hi", "max_new_tokens": 1, "inference_extra_headers": {name: value}}
    with httpx.Client(base_url=live.url, timeout=10, headers={"authorization": f"Bearer {KEY}"}) as c:
        check(c.post("/v4/beta/completions", json=body), "/v4/beta/completions", body)


def _openapi() -> dict[str, Any]:
    """The gateway's own OpenAPI document, as ``GET /schema/openapi.json`` serves it."""
    app = __import__("switchyard.http.app", fromlist=["create_app"]).create_app(fuzz_config("http://127.0.0.1:9/v1"))
    schema = app.litestar.openapi_schema
    add_completion_paths(schema, {p: (summary, dialects) for p, (_, summary, dialects) in HOT.items()},
                         MODELS)
    return schema.to_schema()


SCHEMA = schemathesis.openapi.from_dict(_openapi())


@SCHEMA.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
def test_every_operation(case: Any, live: Live) -> None:
    auth = MASTER if case.path.startswith("/admin") else KEY
    resp = case.call(base_url=live.url, headers={"authorization": f"Bearer {auth}"}, timeout=10)
    case.validate_response(resp, checks=[not_a_server_error])
    assert all(s not in resp.text for s in SECRETS)
