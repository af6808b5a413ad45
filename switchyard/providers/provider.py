"""An upstream deployment: the canonical request written in the upstream's dialect, sent over a
pooled httpx transport, and its answer read back into canonical chunks, relayed as they arrive.

The backend drives the transport directly (``handle_async_request``): httpx's ``AsyncClient``
adds cookies, redirects and auth hooks we do not use, at a cost of tens of microseconds a call.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import httpx
import msgspec

from switchyard.core.canonical import CanonicalRequest, Chunk
from switchyard.core.config import DeploymentConfig
from switchyard.core.errors import InvalidRequest, UpstreamError
from switchyard.core.propagation import OUTGOING
from switchyard.dialects import passthrough
from switchyard.dialects.outgoing import Emulation, render_request
from switchyard.dialects.registry import DIALECTS
from switchyard.providers.client import make_transport
from switchyard.providers.emulation import Emulator
from switchyard.providers.exchange import Answered, Exchange, make_exchange
from switchyard.providers.failures import Scrubber, error_in_answer, error_message, http_error
from switchyard.providers.parse import chunks_of, decode_answer, embeddings_of
from switchyard.providers.sse import sse_batches

_decode = msgspec.json.decode
_encode = msgspec.json.encode

# Path below base_url, per upstream dialect and request kind.
_PATHS = {"sgp": {"completion": "/beta/completions", "chat": "/beta/chat/completions"}}
_DEFAULT_PATHS = {"completion": "/completions", "chat": "/chat/completions", "embedding": "/embeddings"}


class UpstreamBackend:
    def __init__(self, deployment: DeploymentConfig, model_name: str, *,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.deployment = deployment
        self.dialect = DIALECTS[deployment.dialect]
        # The name the upstream knows: configured, else the model_name part of vendor/model_name.
        self.upstream_model = deployment.model or model_name.split("/", 1)[-1]
        self._given_transport = transport
        self._exchange: Exchange | None = None
        base = (deployment.base_url or "").rstrip("/")
        paths = _PATHS.get(deployment.dialect, _DEFAULT_PATHS)
        self._urls = {kind: httpx.URL(base + path) for kind, path in paths.items()}
        self._headers = {"content-type": "application/json", **deployment.headers}
        if deployment.api_key:
            if deployment.dialect == "sgp":
                self._headers["x-api-key"] = deployment.api_key
            else:
                self._headers["authorization"] = f"Bearer {deployment.api_key}"
        self._own_headers = frozenset(k.lower() for k in self._headers)  # never from a caller
        self._scrub = Scrubber(deployment.api_key)

    ready = True

    async def count_tokens(self, req: CanonicalRequest) -> int | None:
        return None  # the upstream's tokenizer is not here: the gateway estimates

    def stats(self) -> dict[str, float]:
        return {}

    async def start(self) -> None:
        if self._exchange is None:
            transport = self._given_transport or make_transport(self.deployment)
            self._exchange = make_exchange(transport, self._urls, self._headers)

    async def aclose(self) -> None:
        if self._exchange is not None:
            await self._exchange.aclose()
            self._exchange = None

    def generate(self, req: CanonicalRequest,
                 upstream_model: str | None = None) -> AsyncGenerator[Chunk, None]:
        # Everything, refusals included, happens inside the iterator: the router's bookkeeping
        # for an attempt starts when it asks for the first chunk.
        return self._run(req, upstream_model or self.upstream_model)

    def _render(self, req: CanonicalRequest, upstream_model: str) -> tuple[dict[str, Any], Emulation]:
        dep = self.deployment
        passthrough.check_allowed(dep.name, dep.allow_extra_headers, dep.allow_extra_params,
                                  req.extra_headers, req.extra_params)
        if req.extra_headers and not self._own_headers.isdisjoint(req.extra_headers):
            name = sorted(self._own_headers.intersection(req.extra_headers))[0]
            raise InvalidRequest(f"{passthrough.HEADERS_FIELD}.{name}: deployment {dep.name} sets this "
                                 "header itself", param=f"{passthrough.HEADERS_FIELD}.{name}")
        if req.kind == "embedding":
            return self._embedding_body(req, upstream_model), Emulation()
        return render_request(self.dialect, req, upstream_model, dep.allow_extra_params)

    def _embedding_body(self, req: CanonicalRequest, upstream_model: str) -> dict[str, Any]:
        """OpenAI's embeddings body, as the caller wrote it (every OpenAI-family server reads it)."""
        if "embedding" not in self._urls:
            raise InvalidRequest(f"model {req.model} does not serve embeddings: its upstream speaks the "
                                 f"{self.dialect.name} dialect", param="model")
        prompts = req.prompt or []
        body: dict[str, Any] = {"model": upstream_model,
                                "input": prompts[0] if len(prompts) == 1 else prompts}
        for field in ("dimensions", "encoding_format", "user"):
            if (v := getattr(req, field)) is not None:
                body[field] = v
        return body

    async def _run(self, req: CanonicalRequest, upstream_model: str) -> AsyncGenerator[Chunk, None]:
        body, emulation = self._render(req, upstream_model)
        if self._exchange is None:
            await self.start()
        assert self._exchange is not None
        dep = self.deployment
        extra = req.extra_headers or None  # checked when parsed and against the allow-list
        own = OUTGOING.get()  # the request id and trace context
        if own:
            extra = {**extra, **own} if extra else own
        # Whose clock runs out: the caller's deadline (its choice) or the deployment's timeout.
        callers = req.timeout is not None and req.timeout < dep.timeout
        timeout = min(req.timeout, dep.timeout) if req.timeout is not None else dep.timeout
        try:
            resp = await self._exchange.send(req.kind, _encode(body), extra, timeout, dep.connect_timeout)
        except httpx.TimeoutException:
            raise UpstreamError.timed_out(dep.name, callers_deadline=callers) from None
        except httpx.TransportError as e:
            raise UpstreamError.unreachable(dep.name, type(e).__name__) from None
        try:
            if resp.status >= 400:
                raise http_error(dep.name, resp.status, await resp.read(), resp.header("retry-after"),
                                 self._scrub)
            answer = self._stream(req, resp) if req.stream else self._whole(req, resp)
            stops = Emulator(emulation)
            try:
                async for batch in answer:  # the chunks of events that arrived together
                    out = stops.apply(batch)
                    for ch in out[:-1]:
                        ch.more = True
                    for ch in out:
                        yield ch
                    if stops.all_stopped(req):
                        break  # every choice hit a gateway-applied stop: close the upstream
            finally:
                await answer.aclose()
        except httpx.TimeoutException:
            raise UpstreamError.timed_out(dep.name, callers_deadline=callers, mid_response=True) from None
        except httpx.TransportError as e:
            raise UpstreamError.broken(dep.name, f"broke off the response: {type(e).__name__}") from None
        finally:
            await resp.aclose()

    async def _whole(self, req: CanonicalRequest, resp: Answered) -> AsyncGenerator[list[Chunk], None]:
        if req.kind == "embedding":
            yield [embeddings_of(self.deployment.name, await resp.read(), len(req.prompt or ()))]
            return
        try:
            obj = decode_answer(await resp.read())
        except msgspec.DecodeError:
            raise UpstreamError.broken(self.deployment.name, "sent a malformed answer") from None
        if obj.error is not None:
            raise error_in_answer(self.deployment.name, obj.error, self._scrub, mid_stream=False)
        if not obj.choices:
            raise UpstreamError.broken(self.deployment.name, "sent an answer without any choice")
        yield chunks_of(obj, chat=req.kind == "chat", delta=False)

    async def _stream(self, req: CanonicalRequest, resp: Answered) -> AsyncGenerator[list[Chunk], None]:
        """The chunks of each arrival of events. A stream must be one (its content type), its
        events must read, an ``error`` event is a failure (after what came before it), and a
        stream with no event, or cut before its end ([DONE] or a finish_reason), is no success."""
        name = self.deployment.name
        ctype = resp.header("content-type") or ""
        if not ctype.lower().startswith(SSE):
            raw = await _read_some(resp, 4096)
            said = error_message(raw) if raw else None
            raise UpstreamError.broken(name, f"answered a streamed request with {ctype or 'no content type'}"
                                       f", not an event stream" + (f": {self._scrub(said)}" if said else ""))
        chat = req.kind == "chat"
        events = 0
        finished = done = False
        async for batch in sse_batches(aiter(resp)):
            out: list[Chunk] = []
            failure: UpstreamError | None = None
            for data in batch:
                if data == b"[DONE]":
                    done = True
                    break
                try:
                    ans = decode_answer(data)
                except msgspec.DecodeError:
                    failure = UpstreamError.broken(name, "sent a malformed stream event")
                    break
                if ans.error is not None:
                    failure = error_in_answer(name, ans.error, self._scrub, mid_stream=True)
                    break
                if ans.choices is not None or ans.usage is not None:
                    events += 1
                    got = chunks_of(ans, chat=chat, delta=True)
                    finished = finished or any(c.finish_reason for c in got)
                    out.extend(got)
            if out:
                yield out  # what was good still reaches the caller (and its usage counts)
            if failure is not None:
                raise failure
            if done:
                break
        if events == 0:
            raise UpstreamError.broken(name, "sent a stream without any event")
        if not (done or finished):  # the body ended (a close) before [DONE] or any finish_reason
            raise UpstreamError.broken(name, "ended the stream before it finished")


SSE = "text/event-stream"


async def _read_some(resp: Answered, limit: int) -> bytes:
    """At most about ``limit`` bytes of a body we only quote from."""
    parts: list[bytes] = []
    size = 0
    async for chunk in resp:
        parts.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(parts)[:limit]
