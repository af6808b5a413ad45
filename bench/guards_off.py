"""Gateway CPU per request with no guardrail configured, to compare a checkout with guardrails
against one without (the guards-off path must cost nothing measurable).

    PYTHONPATH=<checkout> .venv/bin/python bench/guards_off.py [--n 300]

One gateway in this process in front of the fake upstream, ``--n`` whole chat requests in a row;
the figure is this process's CPU time (``time.process_time``: gateway, fake upstream and client
together, the same work in either checkout) per request, median of 5 rounds. Run it once with
PYTHONPATH set to each checkout, in turns, on a quiet machine; the switchyard imported is the
one PYTHONPATH names.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import switchyard
from switchyard.core.config import parse_config
from tests.fakes.upstream import Behaviour, FakeUpstream
from tests.gateway.conftest import KEY, MASTER, serve


async def main(n: int) -> None:
    async with FakeUpstream(default=Behaviour(text="a short answer")) as up:
        config = parse_config({
            "logging": {"access": False}, "master_key": MASTER, "metrics": {"enabled": False},
            "models": [{"name": "vendor/off", "deployments": [{"name": "d", "dialect": "openai",
                                                               "base_url": up.url}]}],
            "teams": [{"name": "t"}], "keys": [{"id": "k", "team": "t", "key": KEY}]})
        body = {"model": "vendor/off", "messages": [{"role": "user", "content": "hello"}]}
        async with serve(config) as gw:
            for _ in range(50):
                await gw.post("/v1/chat/completions", json=body)
            rounds = []
            for _ in range(5):
                t0 = time.process_time()
                for _ in range(n):
                    r = await gw.post("/v1/chat/completions", json=body)
                    assert r.status_code == 200
                rounds.append((time.process_time() - t0) / n * 1e6)
    print(f"{switchyard.__file__}: {statistics.median(rounds):.0f} us CPU per request "
          f"(rounds {', '.join(f'{r:.0f}' for r in rounds)})")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    asyncio.run(main(ap.parse_args().n))
