"""The context window an OpenAI-family upstream reports: vLLM's ``GET /v1/models`` answers
``max_model_len`` per model. Asked once per deployment, lazily (the first request whose overflow
policy needs it), within a bounded time; a failure or a server that does not say means unknown
(asked again after ``RETRY_S``). The router uses it where no ``context_window`` is configured."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import httpx
import msgspec

TIMEOUT_S = 2.0
RETRY_S = 300.0


class _Model(msgspec.Struct):
    id: str
    max_model_len: int | None = None


class _Models(msgspec.Struct):
    data: list[_Model]


class ReportedWindows:
    """The windows one deployment's ``/models`` reports, by upstream model id."""

    def __init__(self, base: httpx.URL, headers: Mapping[str, str],
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._url = str(base).rstrip("/") + "/models"
        self._headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        self._transport = transport
        self._known: dict[str, int] | None = None
        self._failed_at = -RETRY_S
        self._asking: asyncio.Task[dict[str, int] | None] | None = None

    async def window(self, model: str) -> int | None:
        if self._known is None:
            if time.monotonic() - self._failed_at < RETRY_S:
                return None
            if self._asking is None:  # one question at a time, whoever asks
                self._asking = asyncio.ensure_future(self._ask())
            asking = self._asking
            known = await asyncio.shield(asking)
            if self._asking is asking:
                self._asking = None
                if known is None:
                    self._failed_at = time.monotonic()
                else:
                    self._known = known
            if known is None:
                return None
            return known.get(model)
        return self._known.get(model)

    async def _ask(self) -> dict[str, int] | None:
        try:
            async with httpx.AsyncClient(transport=self._transport, timeout=TIMEOUT_S) as client:
                r = await asyncio.wait_for(client.get(self._url, headers=self._headers), TIMEOUT_S)
            if r.status_code != 200:
                return None
            models = msgspec.json.decode(r.content, type=_Models)
        except (httpx.HTTPError, msgspec.DecodeError, TimeoutError, OSError):
            return None
        return {m.id: m.max_model_len for m in models.data
                if m.max_model_len is not None and m.max_model_len > 0}
