"""Start a fake upstream's aiohttp app on loopback: one place for what every fake repeats."""

from __future__ import annotations

import socket

from aiohttp import web


async def serve_app(app: web.Application, port: int = 0, **runner: float) -> tuple[web.AppRunner, int]:
    """The started runner and its port (``port`` 0: any free one). ``runner``: AppRunner options
    (``shutdown_timeout``)."""
    r = web.AppRunner(app, handle_signals=False, **runner)
    await r.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    await web.SockSite(r, sock).start()
    return r, sock.getsockname()[1]
