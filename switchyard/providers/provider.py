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

from switchyard.core.canonical import CanonicalRequest, Chunk, Usage, replace
from switchyard.core.deployments import DeploymentConfig, split_query
from switchyard.core.errors import InvalidRequest, UpstreamError
from switchyard.core.propagation import OUTGOING
from switchyard.dialects import passthrough
from switchyard.providers.client import make_transport
from switchyard.providers.emulation import Emulation, Emulator
from switchyard.providers.exchange import Answered, Exchange, make_exchange
from switchyard.providers.failures import (
    Scrubber,
    error_message,
    http_error,
    retry_after_of,
    transport_errors,
    wire_failure,
)
from switchyard.providers.openai.window import ReportedWindows
from switchyard.providers.rows import wire_for
from switchyard.providers.sse import sse_batches
from switchyard.providers.turns import one_prompt
from switchyard.providers.wire import Wire, WireError

_encode = msgspec.json.encode


class UpstreamBackend:
    def __init__(self, deployment: DeploymentConfig, model_name: str, *,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.deployment = deployment
        self.wire: Wire = wire_for(deployment)
        self.codec = self.wire.codec
        self.upstream_model = deployment.upstream_model(model_name)
        self._given_transport = transport
        self._exchange: Exchange | None = None
        base, self._query = split_query(deployment.base_url or "")  # Azure: ?api-version=...
        self._base = httpx.URL(self.wire.base(base) if self.wire.base is not None else base)
        self.auth = self.wire.auth(deployment)
        self._headers = {"content-type": "application/json", **self.auth.fixed, **self.wire.headers,
                         **deployment.headers}
        # never from a caller: the credential headers (all of them, set or not) and what we send
        self._own_headers = self.auth.owned | frozenset(k.lower() for k in self._headers)
        # Sent per request, not in the prebuilt prefix: the native lane sends the caller's instead.
        self._per_call = {k: self._headers.pop(k) for k in list(self._headers)
                          if k.lower() in self.wire.native_headers}
        self._native = self.wire.native if self.wire.native_dialect else None
        self._targets: dict[tuple[str, bool, str], str] = {}
        self._scrub = Scrubber(deployment.api_key, deployment.aws_secret_access_key,
                               deployment.aws_session_token)
        # A server that may report its window (vLLM) is asked; signed APIs are not.
        self._windows = (ReportedWindows(self._base, self._headers, transport)
                         if self.wire.caps.reports_window and not self.auth.signs else None)

    ready = True
    load_error: str | None = None  # nothing loads in the background

    async def count_tokens(self, req: CanonicalRequest, *, exact: bool = False) -> int | None:
        """The upstream's own count when asked for the count itself (``exact``: count_tokens) and
        the caller spoke this upstream's API; else None and the gateway estimates (an upstream
        round trip per request would cost every request its latency)."""
        path = self.wire.count_target(self.upstream_model)
        lane = self.wire.count
        native = req.native
        if not exact or path is None or lane is None or not self._is_native(req) or native is None:
            return None
        count, counted = lane.body, lane.read
        dep = self.deployment
        body = count(native.body, self.upstream_model, dep.allow_extra_params)
        if self._query:
            path += ("&" if "?" in path else "?") + self._query
        raw = _encode(body)
        if self._exchange is None:
            await self.start()
        assert self._exchange is not None
        try:
            if self.auth.refresher is not None:
                await self.auth.refresher.ready(dep.timeout)
            signed = self.auth.sign("POST", path, self._exchange.host, raw) if self.auth.signs else None
            with transport_errors(dep.name, callers_deadline=False):
                resp = await self._exchange.send(path, raw, self._headers_for(req), dep.timeout,
                                                 dep.connect_timeout, signed)
            try:
                answer = await resp.read()
                status = resp.status
            finally:
                await resp.aclose()
        except UpstreamError:
            return None  # the estimate stands in
        if status != 200:
            return None
        n = counted(answer)
        return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None

    def _is_native(self, req: CanonicalRequest) -> bool:
        """The native lane: the caller spoke the API this upstream speaks."""
        return (self._native is not None and req.native is not None
                and req.native.api == self.wire.native_dialect)

    def _headers_for(self, req: CanonicalRequest) -> dict[str, str] | None:
        """The per-request API headers: the deployment's, or on the native lane the caller's."""
        if not self._per_call and not self.wire.native_headers:
            return None
        if req.native is not None and self._is_native(req):
            sent = {k: v for k, v in req.native.headers.items() if k.lower() in self.wire.native_headers}
            return {**self._per_call, **sent}
        return self._per_call or None

    def stats(self) -> dict[str, float]:
        return {}

    async def reported_window(self, upstream_model: str | None = None) -> int | None:
        """The context window the upstream reports for the model (vLLM's ``max_model_len``)."""
        if self._windows is None:
            return None
        return await self._windows.window(upstream_model or self.upstream_model)

    async def start(self) -> None:
        if self._exchange is None:
            transport = self._given_transport or make_transport(self.deployment)
            self._exchange = make_exchange(transport, self._base, self._headers)
        if self.auth.refresher is not None:  # a fetched credential: kept fresh by its own task
            self.auth.refresher.start()

    async def aclose(self) -> None:
        if self.auth.refresher is not None:
            await self.auth.refresher.aclose()
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
        if self._native is not None and req.native is not None and self._is_native(req):
            # The caller's own body (cache_control, system blocks, thinking signatures kept),
            # but for what the gateway owns; its unknown fields pass only when allowed.
            body = self._native(req.native.body, req, upstream_model, dep.allow_extra_params)
            emulation = Emulation()
        else:
            body, emulation = self.codec.render(req, upstream_model, dep)
        # Placed on the body as it will be sent, whichever lane wrote it: the caller's own marks
        # (which leave it alone) may sit anywhere in it, allowed extra params included.
        if dep.prompt_cache == "auto" and self.wire.cache_breakpoints is not None:
            self.wire.cache_breakpoints(body)
        return body, emulation

    def _target(self, req: CanonicalRequest, upstream_model: str) -> str:
        key = (req.kind, req.stream, upstream_model)
        t = self._targets.get(key)
        if t is None:
            if (req.kind, req.stream) not in self.wire.paths:  # (completions are sent as chat)
                kinds = {k for k, _ in self.wire.paths}
                serves = ("embeddings" if kinds == {"embedding"} else "text" if "chat" in kinds
                          else "completions")
                asked = {"embedding": "embeddings", "completion": "completions"}.get(req.kind, "chat")
                raise InvalidRequest(f"model {req.model} serves {serves} only: its upstream "
                                     f"({self.wire.name}) has no {asked} endpoint", param="model")
            if len(self._targets) >= 1024:  # wildcard routes vary the model: keep it bounded
                self._targets.clear()
            t = self.wire.target(req.kind, req.stream, upstream_model)
            if self._query:  # the base URL's own query follows the path (and the row's query)
                t += ("&" if "?" in t else "?") + self._query
            self._targets[key] = t
        return t

    async def _run(self, req: CanonicalRequest, upstream_model: str) -> AsyncGenerator[Chunk, None]:
        echo: str | None = None
        if req.echo is not None and not self.wire.caps.echo:  # (echo: false is no request at all)
            if req.echo and req.kind == "completion":  # every chat-only upstream: emulated, here alone
                echo = _echo_of(req, self.wire.name)
            req = replace(req, echo=None)
        if req.kind == "completion" and ("completion", req.stream) not in self.wire.paths:
            req = _as_chat(req, self.wire.name)
        target = self._target(req, upstream_model)  # a kind the row has no path for: refused first
        body, emulation = self._render(req, upstream_model)
        if echo is not None:
            emulation.echo = echo
        if self._exchange is None:
            await self.start()
        assert self._exchange is not None
        dep = self.deployment
        extra = req.extra_headers or None  # checked when parsed and against the allow-list
        api = self._headers_for(req)
        if api:
            extra = {**api, **extra} if extra else api
        own = OUTGOING.get()  # the request id and trace context
        if own:
            extra = {**extra, **own} if extra else own
        raw = _encode(body)
        # Whose clock runs out: the caller's deadline (its choice) or the deployment's timeout.
        callers = req.timeout is not None and req.timeout < dep.timeout
        timeout = min(req.timeout, dep.timeout) if req.timeout is not None else dep.timeout
        if self.auth.refresher is not None:  # waits only for this deployment's own fetch, bounded
            await self.auth.refresher.ready(timeout)
        signed = self.auth.sign("POST", target, self._exchange.host, raw) if self.auth.signs else None
        with transport_errors(dep.name, callers_deadline=callers):
            resp = await self._exchange.send(target, raw, extra, timeout, dep.connect_timeout, signed)
        try:
            with transport_errors(dep.name, callers_deadline=callers, mid_response=True):
                if resp.status >= 400:
                    raise http_error(dep.name, resp.status, await resp.read(), retry_after_of(resp.header),
                                     self._scrub, self.wire.retry_statuses)
                stops = Emulator(emulation)
                if not req.stream:  # one batch: no generator of batches for it
                    for ch in _together(stops.apply(await self._whole(req, resp))):
                        yield ch
                    return
                answer = self._stream(req, resp)
                try:
                    async for batch in answer:  # the chunks of events that arrived together
                        for ch in _together(stops.apply(batch)):
                            yield ch
                        if stops.all_stopped(req):
                            break  # every choice hit a gateway-applied stop: close the upstream
                finally:
                    await answer.aclose()
        finally:
            await resp.aclose()

    def _failure(self, e: WireError) -> UpstreamError:
        return wire_failure(self.deployment.name, e.what, e.said, self._scrub, retryable=e.retryable,
                            status=e.status)

    def _reported_usage(self, raw: bytes, req: CanonicalRequest) -> Usage | None:
        """The usage in a whole answer's body, if it reads as one."""
        try:
            chunks = self.codec.whole(raw, req) if raw else []
        except (WireError, UpstreamError, ValueError):
            return None
        return next((c.usage for c in reversed(chunks) if c.usage is not None), None)

    async def _whole(self, req: CanonicalRequest, resp: Answered) -> list[Chunk]:
        raw = await resp.read()
        try:
            chunks = self.codec.whole(raw, req)
        except WireError as e:
            raise self._failure(e) from None
        if (h := self.wire.tokens_header) is not None and chunks and chunks[-1].usage is None:
            said = resp.header(h) or ""
            if said.isdigit():  # else the gateway's own estimate stands (the tally's)
                chunks[-1].usage = Usage(prompt_tokens=int(said))
        return chunks

    async def _stream(self, req: CanonicalRequest, resp: Answered) -> AsyncGenerator[list[Chunk], None]:
        """The chunks of each arrival of events. A stream must be one (its content type), its
        events must read, an error event is a failure (after what came before it), and a stream
        that ends without its end (the codec's ``ending``) is no success."""
        name = self.deployment.name
        wire = self.wire
        ctype = resp.header("content-type") or ""
        if not ctype.lower().startswith(wire.stream_type):
            raw = await _read_some(resp, 1 << 20)
            said = error_message(raw) if raw else None
            quoted = f": {self._scrub(said[:500])}" if said else ""
            err = UpstreamError.broken(name, f"answered a streamed request with {ctype or 'no content type'}"
                                       f", not an event stream{quoted}")
            err.billed = self._reported_usage(raw, req)  # a whole answer: it did (and billed) the work
            raise err
        decoder = self.codec.stream(req)
        frames = (wire.framing or sse_batches)(aiter(resp))
        try:
            async for batch in frames:
                out: list[Chunk] = []
                failure: UpstreamError | None = None
                for event, data in batch:
                    try:
                        out.extend(decoder.feed(event, data))
                    except WireError as e:
                        failure = self._failure(e)
                        break
                    if decoder.done:
                        break
                if out:
                    if decoder.done:  # the end follows at once: the last events go with the close
                        out[-1].more = True
                    yield out  # what was good still reaches the caller (and its usage counts)
                if failure is not None:
                    raise failure
                if decoder.done:
                    break
        finally:
            # Left at its end event, the reader is closed here: dropped unclosed, the event loop's
            # finalizer hook would close it in a task of its own, woken through the loop's
            # thread-safe queue (an eventfd write and read, a task: every stream paid that).
            await frames.aclose()
        why = decoder.ending()
        if why is not None:
            raise UpstreamError.broken(name, why)


def _together(chunks: list[Chunk]) -> list[Chunk]:
    """``chunks``, each but the last marked as having more of its arrival behind it."""
    for ch in chunks[:-1]:
        ch.more = True
    return chunks


def _echo_of(req: CanonicalRequest, upstream: str) -> str:
    """The text a chat-only upstream's answer is prefixed with for ``echo`` (OpenAI concatenates
    prompt and completion, no separator). The prompt's own logprobs (lm-eval's loglikelihood) are
    not to be had from a chat API: echo with logprobs is refused, naming echo."""
    if req.logprobs is not None:
        raise InvalidRequest(f"echo with logprobs is not supported by model {req.model}: its upstream "
                             f"({upstream}) is a chat API, which gives no logprobs for the prompt",
                             param="echo")
    return one_prompt(req, upstream)


def _as_chat(req: CanonicalRequest, upstream: str) -> CanonicalRequest:
    """A completion body (any completion dialect) for a chat-only API: its prompt as one user
    message."""
    return replace(req, kind="chat", prompt=None,
                   messages=[{"role": "user", "content": one_prompt(req, upstream)}])


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
