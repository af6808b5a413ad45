"""An upstream deployment: the canonical request written in the upstream's dialect, sent over a
pooled httpx transport, and its answer read back into canonical chunks, relayed as they arrive.

The backend drives the transport directly (``handle_async_request``): httpx's ``AsyncClient``
adds cookies, redirects and auth hooks we do not use, at a cost of tens of microseconds a call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec

from backends.upstream.client import make_transport
from backends.upstream.exchange import Answered, Exchange, make_exchange
from backends.upstream.parse import chunks_of, decode_answer
from backends.upstream.sse import sse_batches
from gateway.canonical import CanonicalRequest, Chunk
from gateway.config import DeploymentConfig
from gateway.dialects import passthrough
from gateway.dialects.outgoing import Emulation, render_request
from gateway.dialects.registry import DIALECTS
from gateway.errors import InvalidRequest, UpstreamError
from gateway.stops import StopScanner

_decode = msgspec.json.decode
_encode = msgspec.json.encode

# Path below base_url, per upstream dialect and request kind.
_PATHS = {"sgp": {"completion": "/beta/completions", "chat": "/beta/chat/completions"}}
_DEFAULT_PATHS = {"completion": "/completions", "chat": "/chat/completions"}
_RETRYABLE = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


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

    def generate(self, req: CanonicalRequest, upstream_model: str | None = None) -> AsyncIterator[Chunk]:
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
        return render_request(self.dialect, req, upstream_model, dep.allow_extra_params)

    async def _run(self, req: CanonicalRequest, upstream_model: str) -> AsyncIterator[Chunk]:
        body, emulation = self._render(req, upstream_model)
        if self._exchange is None:
            await self.start()
        assert self._exchange is not None
        extra = req.extra_headers or None  # checked when parsed and against the allow-list
        timeout = self.deployment.timeout if req.timeout is None else min(req.timeout,
                                                                           self.deployment.timeout)
        chat = req.kind == "chat"
        try:
            resp = await self._exchange.send(req.kind, _encode(body), extra, timeout,
                                             self.deployment.connect_timeout)
        except httpx.TimeoutException as e:
            raise UpstreamError(f"upstream {self.deployment.name} timed out: {e}", status=504,
                                retryable=True) from None
        except httpx.TransportError as e:
            raise UpstreamError(f"upstream {self.deployment.name} is unreachable: {type(e).__name__}",
                                status=502, retryable=True) from None
        try:
            if resp.status >= 400:
                await self._raise_for(resp)
            stops = _Stops(emulation)
            if not req.stream:
                obj = decode_answer(await resp.read())
                for ch in stops.apply(chunks_of(obj, chat=chat, delta=False)):
                    yield ch
                return
            async for batch in sse_batches(aiter(resp)):
                out: list[Chunk] = []
                done = False
                try:
                    for data in batch:
                        if data == b"[DONE]":
                            done = True
                            break
                        out.extend(stops.apply(chunks_of(decode_answer(data), chat=chat, delta=True)))
                except msgspec.DecodeError:
                    for ch in out:  # what was good still reaches the caller
                        yield ch
                    raise
                for ch in out[:-1]:
                    ch.more = True
                for ch in out:
                    yield ch
                if done or stops.all_stopped(req):
                    break  # [DONE], or every choice hit a gateway-applied stop: close the upstream
        except httpx.TimeoutException:
            raise UpstreamError(f"upstream {self.deployment.name} timed out mid-response",
                                status=504) from None
        except httpx.TransportError as e:
            raise UpstreamError(f"upstream {self.deployment.name} broke off the response: "
                                f"{type(e).__name__}", status=502) from None
        except msgspec.DecodeError:
            raise UpstreamError(f"upstream {self.deployment.name} sent a malformed response",
                                status=502) from None
        finally:
            await resp.aclose()

    async def _raise_for(self, resp: Answered) -> None:
        raw = await resp.read()
        message = _error_message(raw) or f"HTTP {resp.status}"
        status = resp.status
        retry_after = _retry_after(resp.header("retry-after"))
        retryable = status in _RETRYABLE
        # 4xx (other than 429/408) passes through: the caller's request is what the upstream refused.
        raise UpstreamError(f"upstream {self.deployment.name}: {message}", status=status,
                            retryable=retryable, retry_after=retry_after,
                            type=_error_type(status))


class _Stops:
    """Gateway-applied stop sequences and echo, per choice."""

    def __init__(self, emulation: Emulation) -> None:
        self.emulation = emulation
        self.scanners: dict[int, StopScanner] = {}
        self.echoed: set[int] = set()
        self.stopped: set[int] = set()

    def apply(self, chunks: list[Chunk]) -> list[Chunk]:
        em = self.emulation
        if em.stop is None and em.echo is None:
            return chunks
        out = []
        for ch in chunks:
            i = ch.index
            if i in self.stopped:
                if ch.usage is not None:  # usage still counts after a gateway stop
                    out.append(Chunk(index=i, usage=ch.usage))
                continue
            if em.echo is not None and i not in self.echoed and (ch.text or ch.finish_reason):
                self.echoed.add(i)
                ch.text = em.echo + ch.text
            if em.stop is not None:
                sc = self.scanners.get(i)
                if sc is None:
                    sc = self.scanners[i] = StopScanner(em.stop, em.include_stop)
                ch.text = sc.feed(ch.text)
                if sc.word is not None:
                    ch.finish_reason, ch.stop_word = "stop", sc.word
                    self.stopped.add(i)
                elif ch.finish_reason is not None:
                    ch.text += sc.flush()
            out.append(ch)
        return out

    def all_stopped(self, req: CanonicalRequest) -> bool:
        total = len(req.prompt or [None]) * req.choices_per_prompt
        return bool(self.stopped) and len(self.stopped) >= total


def _error_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    return "invalid_request_error" if 400 <= status < 500 else "upstream_error"


def _error_message(raw: bytes) -> str | None:
    try:
        obj = _decode(raw)
    except msgspec.DecodeError:
        text = raw.decode(errors="replace").strip()
        return text[:500] or None
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail")
            return str(msg) if msg else None
        if isinstance(err, str):
            return err
        detail = obj.get("detail")
        if detail:
            return str(detail)
    return None


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
