"""A gateway process killed with SIGKILL mid-load: after a restart, every request it answered has
its ledger row, once (the Redis stream replays what the dead process had not written)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.conftest import free_port, start_redis, stop
from tests.policies.ledger.helpers import KEYS, ledger_config, wait_rows
from tests.policies.test_multiprocess import gateway, wait_healthy

BODY = {"model": "gpt-4o", "max_tokens": 3, "messages": [{"role": "user", "content": "x"}]}


@pytest.mark.slow
async def test_sigkill_mid_load_then_restart_writes_every_answered_request_once(upstream, database_url):
    with tempfile.TemporaryDirectory() as d:
        rport = free_port()
        redis = start_redis(rport, cwd=d)
        procs: list[subprocess.Popen[bytes]] = []
        try:
            # The first gateway writes slowly (a small batch, a long pause), so most of its records
            # are still in the stream, some read but unwritten, when it dies.
            raw = ledger_config(upstream.url, database_url, store=f"redis://127.0.0.1:{rport}/0",
                                batch=5, interval=1.0, claim_idle=1.0)
            cfg = Path(d) / "gw.json"
            cfg.write_text(json.dumps(raw))
            port = free_port()
            procs.append(gateway(cfg, port, Path(d) / "gw.log"))
            await wait_healthy(port, procs)
            answered: list[tuple[float, str]] = []  # (when the answer was complete, request id)
            sent: set[str] = set()
            stop_at = time.monotonic() + 20  # the kill ends the load

            async def worker(w: int) -> None:
                async with httpx.AsyncClient(timeout=10) as c:
                    i = 0
                    while time.monotonic() < stop_at:
                        rid = f"w{w}-{i}"
                        i += 1
                        sent.add(rid)
                        try:
                            key = KEYS["k1" if w % 2 else "k2"]
                            r = await c.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=BODY,
                                             headers={"authorization": f"Bearer {key}", "x-request-id": rid})
                        except httpx.TransportError:
                            return  # the gateway is gone
                        assert r.status_code == 200, r.text
                        answered.append((time.monotonic(), rid))

            # Once the writer is at work, the table is locked: its insert in flight blocks (the batch
            # read, not acknowledged) and later records stay unread, however fast it was until then.
            # The blocked insert may still commit after the kill: the replay must not double it.
            lock = await asyncpg.connect(database_url)
            tx = lock.transaction()

            async def killer() -> float:
                give_up = time.monotonic() + 15
                while True:  # the writer has made the schema and written a first batch
                    assert time.monotonic() < give_up, "the first gateway wrote no row in 15 s"
                    await asyncio.sleep(0.1)
                    try:
                        if await lock.fetchval("SELECT count(*) FROM usage_records"):
                            break
                    except asyncpg.UndefinedTableError:
                        pass
                await tx.start()
                await lock.execute("LOCK TABLE usage_records IN ACCESS EXCLUSIVE MODE")
                await asyncio.sleep(0.5)
                procs[0].send_signal(signal.SIGKILL)
                return time.monotonic()

            try:
                _, killed_at = await asyncio.gather(asyncio.gather(*(worker(w) for w in range(6))),
                                                    killer())
                procs[0].wait(10)
                before = await lock.fetchval("SELECT count(*) FROM usage_records")
            finally:
                await tx.rollback()
                await lock.close()
            # Answers completed before the kill were settled into the stream (settle is sent right
            # after the answer; 50 ms is ample margin).
            must = {rid for t, rid in answered if t < killed_at - 0.05}
            assert len(must) > 30
            assert before < len(must)  # the restart has work to do

            # A new process (a new consumer): reads the rest, and claims the dead one's pending.
            raw["usage"] |= {"batch": 50, "interval": 0.05}
            cfg.write_text(json.dumps(raw))
            procs.append(gateway(cfg, port, Path(d) / "gw2.log"))
            await wait_healthy(port, procs[1:])
            rows = await wait_rows(database_url, len(must), timeout=30)
            await asyncio.sleep(2.5)  # past claim_idle: anything pending has been claimed by now
            rows = await wait_rows(database_url, len(must), timeout=1)
            ids = [r["request_id"] for r in rows]
            assert len(ids) == len(set(ids))  # never twice
            assert must <= set(ids)  # every answered request
            assert set(ids) <= sent  # (and maybe some that were in flight at the kill)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                    p.wait(10)
            stop(redis)
