"""Traces: spans exported over OTLP/HTTP to a real loopback collector (protobuf decoded), their
parenting and GenAI attributes, and W3C traceparent from the caller through to the upstream."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.fakes.upstream import Behaviour
from tests.gateway.conftest import base_config, serve, upstream_model
from tests.gateway.helpers import wait_for

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


class Collector:
    """An OTLP/HTTP trace receiver: POST /v1/traces with an ExportTraceServiceRequest."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        msg = ExportTraceServiceRequest()
        msg.ParseFromString(body)
        for rs in msg.resource_spans:
            service = {a.key: a.value.string_value for a in rs.resource.attributes}["service.name"]
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append((service, s))
        return web.Response(body=b"", content_type="application/x-protobuf")

    def named(self, name: str) -> list[Any]:
        return [s for _, s in self.spans if s.name == name]


@pytest.fixture
async def collector() -> AsyncIterator[Collector]:
    c = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", c.handle)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    c.port = sock.getsockname()[1]
    await web.SockSite(runner, sock).start()
    yield c
    await runner.cleanup()


def attrs(span: Any) -> dict[str, Any]:
    out = {}
    for a in span.attributes:
        v = a.value
        out[a.key] = getattr(v, v.WhichOneof("value"))
    return out


async def test_spans_attributes_parenting_and_traceparent_to_the_upstream(upstream, collector,
                                                                         capsys) -> None:
    config = base_config([upstream_model("v/m", upstream.url)],
                         tracing={"otlp_endpoint": f"http://127.0.0.1:{collector.port}/v1/traces",
                                  "service_name": "gw-under-test"},
                         logging={"access": True})
    upstream.script.append(Behaviour(status=503))  # the first attempt fails, the second serves
    async with serve(config) as client:
        r = await client.post("/v1/chat/completions", headers={
            "traceparent": f"00-{TRACE}-{CALLER_SPAN}-01", "x-request-id": "trace-me-1"},
            json={"model": "v/m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert r.status_code == 200
        await wait_for(lambda: len(collector.spans) >= 5, timeout=15)
        await asyncio.sleep(0.2)

    assert {svc for svc, _ in collector.spans} == {"gw-under-test"}
    err = capsys.readouterr().err.splitlines()
    access = [json.loads(line) for line in err if '"event":"request"' in line]
    assert [(r["request_id"], r["trace_id"]) for r in access] == [("trace-me-1", TRACE)]
    (root,) = collector.named("POST /v1/chat/completions")
    assert root.trace_id.hex() == TRACE and root.parent_span_id.hex() == CALLER_SPAN  # the caller's trace
    a = attrs(root)
    assert a["gen_ai.request.model"] == "v/m" and a["gen_ai.response.model"] == "v/m"
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.usage.output_tokens"] == 4 and a["gen_ai.usage.input_tokens"] > 0
    assert a["http.response.status_code"] == 200 and a["switchyard.request_id"] == "trace-me-1"
    assert a["switchyard.key_id"] == "k1" and a["switchyard.attempts"] == 2
    children = [s for _, s in collector.spans if s.parent_span_id == root.span_id]
    assert sorted(s.name for s in children) == ["admit", "chat v/m/d1", "chat v/m/d1", "settle"]
    assert all(s.trace_id == root.trace_id for s in children)
    attempts = sorted(collector.named("chat v/m/d1"), key=lambda s: s.start_time_unix_nano)
    assert attrs(attempts[0])["error.type"] == "upstream_error" and "error.type" not in attrs(attempts[1])
    admit, settle = collector.named("admit")[0], collector.named("settle")[0]
    assert root.start_time_unix_nano <= admit.start_time_unix_nano <= attempts[0].start_time_unix_nano
    assert attempts[1].end_time_unix_nano <= settle.end_time_unix_nano <= root.end_time_unix_nano
    # Each upstream call carried its own attempt's span as parent, and its own request id (the
    # gateway's, never the caller's: the access line names it).
    seen = [{k.lower(): v for k, v in s.headers.items()} for s in upstream.requests]
    sent = [(h["traceparent"], h["x-request-id"]) for h in seen]
    assert [tp for tp, _ in sent] == [f"00-{TRACE}-{s.span_id.hex()}-01" for s in attempts]
    own = access[0]["upstream_request_id"]
    assert [rid for _, rid in sent] == [own, f"{own}-2"] and "trace-me-1" not in own


async def test_a_request_without_traceparent_starts_a_trace(upstream, collector) -> None:
    config = base_config([upstream_model("v/m", upstream.url)],
                         tracing={"otlp_endpoint": f"http://127.0.0.1:{collector.port}/v1/traces"})
    async with serve(config) as client:
        r = await client.post("/v1/completions", json={"model": "v/m", "prompt": "hi", "stream": True})
        assert r.status_code == 200
        r = await client.post("/v1/completions", json={"model": "sk-typo", "prompt": "x"})
        assert r.status_code == 404
        await wait_for(lambda: len(collector.named("POST /v1/completions")) >= 2, timeout=15)
    ok, missing = sorted(collector.named("POST /v1/completions"), key=lambda s: s.start_time_unix_nano)
    assert len(ok.parent_span_id) == 0
    assert attrs(ok)["gen_ai.request.stream"] is True
    headers = {k.lower(): v for k, v in upstream.requests[0].headers.items()}
    assert headers["traceparent"].split("-")[1] == ok.trace_id.hex()
    assert attrs(missing)["http.response.status_code"] == 404
    assert "gen_ai.request.model" not in attrs(missing)  # a name the gateway does not know: not recorded


async def test_without_tracing_the_upstream_still_gets_a_request_id(upstream) -> None:
    async with serve(base_config([upstream_model("v/m", upstream.url)])) as client:
        r = await client.post("/v1/completions", json={"model": "v/m", "prompt": "hi"})
        assert r.status_code == 200
    headers = {k.lower(): v for k, v in upstream.requests[0].headers.items()}
    # (a caller that named none is told the one the upstream saw)
    assert headers["x-request-id"] == r.headers["x-request-id"] and "traceparent" not in headers


PLAIN = r'''
import sys

class Missing:  # as if the otel extra were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, Missing())
from switchyard.http.app import create_app
from switchyard.core.config import parse_config
from switchyard.core.settings import ConfigError

raw = {"models": [{"name": "v/m", "deployments": [{"name": "d", "base_url": "http://127.0.0.1:9/v1"}]}]}
create_app(parse_config(raw))
assert not [m for m in sys.modules if m.startswith("opentelemetry")]
try:
    parse_config({**raw, "tracing": {"otlp_endpoint": "http://127.0.0.1:4318/v1/traces"}})
except ConfigError as e:
    assert "tracing.otlp_endpoint" in str(e) and "switchyard-gateway[otel]" in str(e), str(e)
else:
    raise AssertionError("tracing without the otel extra was accepted")
print("ok")
'''


def test_a_plain_install_serves_without_opentelemetry_and_names_the_extra_when_asked() -> None:
    out = subprocess.run([sys.executable, "-c", PLAIN], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
