"""A credential kept fresh off the event loop (Vertex's OAuth token, the AWS credential chain).

The libraries that fetch them (google-auth, botocore) are blocking: IMDS, STS and OAuth token
endpoints are network calls. So a ``Refresher`` runs the fetch on a worker thread, in a task
started with the backend (``UpstreamBackend.start``), again ``early`` seconds before what it got
expires (or every ``poll`` seconds when the library keeps its own expiry), and after a failure
with a capped backoff. Signing only reads what the task holds. A request of a deployment whose
credential is not there waits for the fetch in flight at most its own deadline (a 503 when it
stalls) and fails at once with a 502 when the last fetch failed; no other deployment waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from switchyard.core.errors import UpstreamError

T = TypeVar("T")
BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)  # seconds between failed fetches


def _on_thread(fn: Callable[[], T], name: str) -> asyncio.Future[T]:
    """``fn()`` on a daemon thread of its own: a stalled token endpoint holds that thread (a
    deployment fetches one at a time), never a worker of the loop's default executor, and never
    keeps the process from exiting."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: object) -> None:
        if not fut.done():  # the task may have been cancelled meanwhile
            if ok:
                fut.set_result(value)  # type: ignore[arg-type]
            else:
                fut.set_exception(value)  # type: ignore[arg-type]

    def run() -> None:
        try:
            out: tuple[bool, object] = (True, fn())
        except Exception as e:
            out = (False, e)
        with contextlib.suppress(RuntimeError):  # the loop closed while we waited
            loop.call_soon_threadsafe(settle, *out)

    threading.Thread(target=run, name=name, daemon=True).start()
    return fut


class Refresher(Generic[T]):
    """``fetch()`` (blocking) -> (the credential, when it expires as a ``clock`` time, or None when
    the library refreshes it itself and ``poll`` says how often to ask). ``what`` names it in errors
    ("a Google OAuth token"); a failure is named by its exception type, never its text (it may quote
    a key or a token)."""

    def __init__(self, deployment: str, what: str, fetch: Callable[[], tuple[T, float | None]], *,
                 early: float = 300.0, poll: float = 60.0, clock: Callable[[], float] = time.time) -> None:
        self.deployment, self.what = deployment, what
        self._fetch, self._early, self._poll, self._clock = fetch, early, poll, clock
        self.value: T | None = None
        self.expires: float | None = None
        self.failure: str | None = None
        self.fetches = 0  # completed fetch attempts (tests, logs)
        self._task: asyncio.Task[None] | None = None
        self._tried: asyncio.Event | None = None  # set when the fetch in flight ends

    def fresh(self) -> bool:
        return self.value is not None and (self.expires is None or self._clock() < self.expires)

    def start(self) -> None:
        """Begin keeping the credential fresh (idempotent; needs a running loop)."""
        if self._task is None or self._task.done():
            self._tried = asyncio.Event()
            self._task = asyncio.create_task(self._run(), name=f"credentials:{self.deployment}")

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def ready(self, within: float | None) -> T:
        """The current credential; waits for a fetch in flight at most ``within`` seconds."""
        if self.fresh():
            assert self.value is not None
            return self.value
        self.start()
        if self.failure is None:
            tried = self._tried
            assert tried is not None
            try:
                async with asyncio.timeout(within):
                    await tried.wait()
            except TimeoutError:
                raise UpstreamError(
                    f"upstream {self.deployment}: could not get {self.what} (its source did not answer "
                    f"in {within:g} s)", status=503, retryable=True) from None
        if self.fresh():
            assert self.value is not None
            return self.value
        why = self.failure or "it had expired"
        raise UpstreamError(f"upstream {self.deployment}: could not get {self.what} ({why})",
                            status=502, retryable=True)

    async def _run(self) -> None:
        failed = 0
        while True:
            try:
                value, expires = await _on_thread(self._fetch, f"credentials-{self.deployment}")
            except Exception as e:  # the library's own errors, transport errors: named, never quoted
                self.failure = type(e).__name__
                delay = BACKOFF[min(failed, len(BACKOFF) - 1)]
                failed += 1
            else:
                self.value, self.expires, self.failure, failed = value, expires, None, 0
                delay = self._poll if expires is None else max(expires - self._early - self._clock(), 1.0)
            self.fetches += 1
            tried, self._tried = self._tried, asyncio.Event()
            if tried is not None:
                tried.set()
            await asyncio.sleep(delay)
