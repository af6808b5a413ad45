"""``/ready`` tells the truth about the policy store: 503 naming it while a real Redis is stopped
(for deployments that fail closed), 200 again once it is back; ``/health`` stays 200."""

from __future__ import annotations

import os
import signal

from tests.conftest import free_port, start_redis, stop
from tests.gateway.conftest import KEY, base_config, serve, upstream_model

LIMITED = [{"id": "k1", "team": "t", "key": KEY, "limits": {"rpm": 1000}}]  # admission asks the store


async def test_ready_follows_a_stopped_and_restarted_redis(upstream, tmp_path) -> None:
    port = free_port()
    redis = start_redis(port, cwd=str(tmp_path))
    try:
        config = base_config([upstream_model("v/m", upstream.url)],
                             store={"url": f"redis://127.0.0.1:{port}/0"}, keys=LIMITED)
        async with serve(config) as client:
            assert (await client.get("/ready")).status_code == 200
            stop(redis)
            r = await client.get("/ready")
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.json()["status"] == "not ready" and "policy store is unreachable" in r.json()["message"]
            assert (await client.get("/health")).status_code == 200
            # What /ready promised: completions are refused while it lasts (fail-closed).
            r = await client.post("/v1/completions", json={"model": "v/m", "prompt": "hi"})
            assert r.status_code == 503
            redis = start_redis(port, cwd=str(tmp_path))
            assert (await client.get("/ready")).status_code == 200
    finally:
        stop(redis)


async def test_a_stalled_redis_is_named_with_the_exception_and_its_reason(upstream, tmp_path) -> None:
    port = free_port()
    redis = start_redis(port, cwd=str(tmp_path))
    try:
        config = base_config([upstream_model("v/m", upstream.url)],
                             store={"url": f"redis://127.0.0.1:{port}/0", "timeout": 0.2}, keys=LIMITED)
        async with serve(config) as client:
            assert (await client.get("/ready")).status_code == 200
            os.kill(redis.pid, signal.SIGSTOP)  # alive, connected, silent
            try:
                r = await client.get("/ready")
            finally:
                os.kill(redis.pid, signal.SIGCONT)
            assert r.status_code == 503
            assert ("the policy store is unreachable (TimeoutError: no answer within store.timeout 0.2 s)"
                    in r.json()["message"]), r.json()
    finally:
        stop(redis)


async def test_fail_open_deployments_stay_ready_while_redis_is_down(upstream) -> None:
    config = base_config([upstream_model("v/m", upstream.url, on_store_error="open")],
                         store={"url": f"redis://127.0.0.1:{free_port()}/0"}, keys=LIMITED)
    async with serve(config) as client:
        assert (await client.get("/ready")).status_code == 200
        r = await client.post("/v1/completions", json={"model": "v/m", "prompt": "hi"})
        assert r.status_code == 200  # served, counted locally
