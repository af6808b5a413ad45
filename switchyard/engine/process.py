"""The engine process: load the model, then loop: take messages, step the engine.

A reader thread turns incoming frames into a queue (and answers token counts at once, so the
policy layer never waits behind a forward pass); the main thread owns the model and the cache.
"""

from __future__ import annotations

import gc
import json
import os
import queue
import socket
import sys
import threading
import time
import traceback
from typing import Any

from switchyard.core.deployments import EngineConfig
from switchyard.core.errors import GatewayError
from switchyard.engine.channel import SyncChannel, error_message
from switchyard.engine.libc import malloc_trim


def main(sock: socket.socket, cfg_data: dict[str, Any]) -> None:
    cfg = EngineConfig.model_validate(cfg_data)
    if cfg.threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(cfg.threads))
    chan = SyncChannel(sock)
    inbox: queue.Queue[tuple[Any, ...]] = queue.Queue()
    holder: dict[str, Any] = {}
    # What the engine emits during one round (submits handled, one step) goes out as one frame.
    outbox: list[tuple[Any, ...]] = []
    threading.Thread(target=_read, args=(chan, inbox, holder), daemon=True).start()
    try:
        from switchyard.engine.loader import load
        from switchyard.engine.scheduler import Engine

        loaded = load(cfg)
        engine = Engine(loaded.model, loaded.tokenizer, outbox.append, max_batch=cfg.max_batch,
                        context_window=cfg.context_window, prefill_chunk=cfg.prefill_chunk,
                        cuda_graphs=cfg.cuda_graphs, attention=cfg.attention,
                        prompt_cache_mib=cfg.prompt_cache_mib)
    except Exception as e:
        chan.send(("failed", f"{type(e).__name__}: {e}", traceback.format_exc()))
        return
    holder["engine"] = engine
    malloc_trim()  # loading freed many temporaries
    # The loaded engine's ~200k objects leave the collector's view: a full collection over them
    # cost ~110 ms (measured), a stall of every stream whenever one came due mid-burst.
    gc.freeze()
    chan.send(("ready", {"context_window": engine.context_window, "pid": os.getpid()}))
    meter = Meter()
    while True:
        try:
            msg = inbox.get(block=not engine.busy)
        except queue.Empty:
            msg = None
        while msg is not None:
            kind = msg[0]
            if kind == "submit":
                engine.submit(msg[1], msg[2])
            elif kind == "cancel":
                engine.cancel(msg[1])
            elif kind in ("shutdown", "eof"):
                return
            try:
                msg = inbox.get_nowait()
            except queue.Empty:
                msg = None
        if engine.busy:
            decoding = len(engine.active)
            engine.step()
            meter.tokens += decoding
            if not engine.busy:
                malloc_trim()  # a burst's freed temporaries go back to the system while idle
        if outbox:
            chan.send(outbox[0] if len(outbox) == 1 else ("batch", list(outbox)))
            outbox.clear()
        meter.report(engine, chan)


class Meter:
    """The engine's gauges for ``/metrics`` (``Backend.stats``): sent when the engine turns busy or
    idle (so a short burst shows, and an idle engine never reports its last batch), and once a
    second in between."""

    EVERY = 1.0  # seconds

    def __init__(self) -> None:
        self.tokens = 0  # decode steps' tokens since the last report
        self.since = time.monotonic()
        self.idle = True

    def report(self, engine: Any, chan: SyncChannel) -> None:
        now = time.monotonic()
        idle = not engine.busy
        if now - self.since < self.EVERY and idle == self.idle:
            return
        self.idle = idle
        cache = engine.runner.cache
        held = sum(cache.length(s.slot) for s in engine.active)
        chan.send(("stats", {"queue_depth": len(engine.waiting), "batch_size": len(engine.active),
                             "tokens_per_second": self.tokens / max(now - self.since, 1e-3),
                             "kv_cache_usage": held / (engine.slots * engine.context_window)}))
        self.tokens, self.since = 0, now


def _read(chan: SyncChannel, inbox: queue.Queue[tuple[Any, ...]], holder: dict[str, Any]) -> None:
    while True:
        msg = chan.recv()
        if msg is None:
            inbox.put(("eof",))
            return
        if msg[0] == "count":
            _count(chan, holder.get("engine"), msg[1], msg[2])
        else:
            inbox.put(msg)


def _count(chan: SyncChannel, engine: Any, rid: int, req: Any) -> None:
    if engine is None:
        chan.send(("error", rid, "Unavailable", "model is loading", None))
        return
    try:
        chan.send(("count", rid, engine.count_tokens(req)))
    except GatewayError as e:
        chan.send(error_message(rid, e))
    except Exception as e:
        chan.send(("error", rid, "GatewayError", f"token count failed: {e}", None))


if __name__ == "__main__":
    main(socket.socket(fileno=int(sys.argv[1])), json.loads(sys.argv[2]))
