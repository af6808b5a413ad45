"""memory://'s usage records are a buffer bounded by load: every request of a known key is one,
refused ones included. The store keeps the newest ``RECORDS_KEPT`` per team (docs/policies.md)
and no more, while its aggregates still count every request."""

from __future__ import annotations

import sys

from switchyard.policies.memory import RECORDS_KEPT, MemoryStore
from switchyard.policies.store import DAY_MS, UsageRecord

NOW = 1_790_000_000_000


def record(i: int) -> UsageRecord:
    return UsageRecord(ts_ms=NOW + i, key_id="k1", team="t", model="", deployment="", prompt_tokens=0,
                       completion_tokens=0, cached_tokens=0, cost_nano=0, status=400, latency_ms=0.1,
                       request_id=f"{i:032x}", requested_model=f"v/fuzz-{i}", reason="bad_request:body")


async def test_the_records_kept_per_team_are_capped_and_the_aggregates_count_all() -> None:
    assert 1_000 <= RECORDS_KEPT <= 20_000  # "refused now" reads 1,000; each record costs ~0.6 KB
    store = MemoryStore(clock=lambda: NOW)
    extra = 50
    for i in range(RECORDS_KEPT + extra):
        store.refuse_nowait("t", record(i))
        store.refuse_nowait("u", record(i)) if i < 10 else None
    kept = await store.records("t", 10 * RECORDS_KEPT)
    assert len(kept) == RECORDS_KEPT
    assert kept[0].request_id == f"{RECORDS_KEPT + extra - 1:032x}"  # newest first
    assert kept[-1].request_id == f"{extra:032x}"  # the oldest 50 dropped off
    assert len(await store.records("u", 100)) == 10  # per team
    day = (await store.aggregates("t", [NOW // DAY_MS]))[NOW // DAY_MS]
    assert sum(v for k, v in day.items() if k.endswith("requests")) == RECORDS_KEPT + extra
    # What the cap bounds: a record and its strings (shared ones counted too), about a kilobyte.
    one = record(1)
    size = sys.getsizeof(one) + sum(sys.getsizeof(getattr(one, f)) for f in one.__slots__)  # type: ignore[attr-defined]
    assert size < 2048, size
