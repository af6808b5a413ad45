"""memory:// -- the store in-process, for one replica (and the fail-open fallback).

The algorithms are those of ``scripts/admit.lua`` and ``scripts/settle.lua``, line for line; the
event loop is single-threaded and nothing here awaits, so each call is atomic like a script.
"""

from __future__ import annotations

import copy
import functools
import math
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from switchyard.policies.plan import KINDS, LIFETIME, NONE, Plan
from switchyard.policies.store import (
    AUDIT_KEPT,
    DAY_MS,
    HOUR_MS,
    MINUTE_MS,
    SEP,
    Admission,
    UsageRecord,
    audit_id,
    dimension_keys_of,
    metric_values,
    month_of,
)

WINDOW_MS = 60_000.0


def _next_month_ms(month: int) -> int:
    y, m = divmod(month + 1, 12)
    m += 1
    # days_from_civil(y, m, 1)
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    mp = m - 3 if m > 2 else m + 9
    doy = (153 * mp + 2) // 5
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return (era * 146097 + doe - 719468) * DAY_MS


def _gcra(tat: float | None, now: int, per_minute: int, cost: int) -> tuple[float, int]:
    """One GCRA step (as admit.lua): the theoretical arrival time after ``cost`` units at
    ``per_minute``, and how many single units would still fit in the window after it."""
    t = 60_000.0 / per_minute
    new = max(tat if tat is not None else now, now) + cost * t
    return new, math.floor((WINDOW_MS - (new - now)) / t + 1e-9)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


# Usage records kept per team (the newest; older ones drop off): what "refused now", the
# overview's errors and /admin/usage/records read without a ledger. Every request of a known key
# is one, refused ones included, at ~0.6 KB of Python heap each (measured): the cap is what bounds
# this buffer under load, ~6 MiB per busy team. It was 100,000 (~60 MiB per team), which a fuzz
# or fault load fills fast since refusals are recorded too. The aggregates (day and minute sums)
# count every request whatever this keeps.
RECORDS_KEPT = 10_000


class MemoryStore:
    def __init__(self, ns: str = "sy", clock: Callable[[], int] = wall_ms,
                 max_records: int | None = None) -> None:
        self.ns = ns
        self.client = None  # in-process: nothing shared across replicas
        self.pipelined = None
        self.timeout = 0.0
        self.clock = clock
        self.skew_ms = 0  # as RedisStore.skew_ms: tests move the clock with it
        self._tat: dict[tuple[str, int], float] = {}  # (counters key, 0 = requests / 1 = tokens)
        self._leases: dict[str, dict[str, int]] = defaultdict(dict)
        self._quota: dict[str, dict[str, int]] = defaultdict(dict)
        self._aggs: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._dims: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        # (team, epoch hour) -> minute sums; hours older than the last two are dropped as new come.
        self._mins: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._unauth: dict[str, int] = defaultdict(int)
        kept = RECORDS_KEPT if max_records is None else max_records
        self._logs: dict[str, deque[UsageRecord]] = defaultdict(lambda: deque(maxlen=kept))
        self._docs: dict[str, dict[str, Any]] = {}
        self._doc_exp: dict[str, int] = {}  # doc name -> expiry (ms) for docs put with a ttl
        self._sweep_at = 1024  # TTL docs held before the next sweep
        self._sets: dict[str, set[str]] = defaultdict(set)
        self._audit: deque[tuple[str, dict[str, Any]]] = deque(maxlen=AUDIT_KEPT)
        self._audit_last = (0, 0)  # (ms, seq) of the newest entry
        # Called with every settled record (the usage ledger's queue, when one is configured).
        self.journal: Callable[[UsageRecord], None] | None = None

    def _now(self) -> int:
        return self.clock() + self.skew_ms

    async def admit(self, plan: Plan, *, tokens: int, spend: int, lease_id: str | None,
                    lease_ttl_ms: int, ticket: str = "") -> Admission:
        now = self._now()
        day, month = now // DAY_MS, month_of(now)
        req: tuple[int, int, int] | None = None
        tok: tuple[int, int, int] | None = None
        writes: list[Callable[[], None]] = []
        for i, s in enumerate(plan.scopes):
            rpm, tpm, conc, tpd, tpmo, spd, spmo = s.vector
            q, cc = s.keys
            rq, tk = (q, 0), (q, 1)
            if rpm != NONE:
                new, rem = _gcra(self._tat.get(rq), now, rpm, 1)
                if new - now > WINDOW_MS:
                    return Admission(False, now, i, "rpm", math.ceil(new - now - WINDOW_MS), rpm)
                if req is None or rem < req[1]:
                    req = (rpm, rem, math.ceil(new - now))
                writes.append(functools.partial(self._tat.__setitem__, rq, new))
            if tpm != NONE:
                if tokens > tpm:
                    return Admission(False, now, i, "too_large", 60_000, tpm)
                new, rem = _gcra(self._tat.get(tk), now, tpm, tokens)
                if new - now > WINDOW_MS:
                    return Admission(False, now, i, "tpm", math.ceil(new - now - WINDOW_MS), tpm)
                if tok is None or rem < tok[1]:
                    tok = (tpm, rem, math.ceil(new - now))
                writes.append(functools.partial(self._tat.__setitem__, tk, new))
            if conc != NONE and lease_id is not None:
                held = self._leases[cc]
                for lid in [lid for lid, exp in held.items() if exp <= now]:
                    del held[lid]
                if len(held) >= conc:
                    return Admission(False, now, i, "concurrency", 1000, conc)
                writes.append(functools.partial(held.__setitem__, lease_id, now + lease_ttl_ms))
            if tpd != NONE or tpmo != NONE or spd != NONE or spmo != NONE:  # (no generator)
                h = self._quota[q]
                mon = 0 if tpd == LIFETIME else month  # as admit.lua: a session's, for its lifetime
                same_day, same_month = h.get("d") == day, h.get("m") == mon
                for kind, lim, used, cost, reset in (
                    ("tokens_per_day", tpd, h.get("td", 0) if same_day else 0, tokens, (day + 1) * DAY_MS),
                    ("tokens_per_month", tpmo, h.get("tm", 0) if same_month else 0, tokens,
                     now - 1 if mon == 0 else _next_month_ms(month)),
                    ("spend_per_day", spd, h.get("sd", 0) if same_day else 0, spend, (day + 1) * DAY_MS),
                    ("spend_per_month", spmo, h.get("sm", 0) if same_month else 0, spend,
                     now - 1 if mon == 0 else _next_month_ms(month)),
                ):
                    if lim >= 0 and used + cost > lim:  # LIFETIME (-2) in tokens/day: no day quota
                        return Admission(False, now, i, kind, reset - now, lim, remaining=lim - used)
                writes.append(functools.partial(self._charge, h, day, mon, tokens, spend))
        for w in writes:
            w()
        return Admission(True, now, req=req, tok=tok)

    @staticmethod
    def _charge(h: dict[str, int], day: int, month: int, tokens: int, spend: int) -> None:
        # Same rule as settle.lua: a newer period resets, an older one is gone (drop the delta).
        d = h.get("d")
        if d is None or d < day:
            h.update(d=day, td=0, sd=0)
        if h["d"] == day:
            h["td"] += tokens
            h["sd"] += spend
        m = h.get("m")
        if m is None or m < month:
            h.update(m=month, tm=0, sm=0)
        if h["m"] == month:
            h["tm"] += tokens
            h["sm"] += spend

    async def settle(self, plan: Plan, *, admitted_ms: int, token_delta: int, spend_delta: int,
                     lease_id: str | None, record: UsageRecord, rates: bool = True,
                     refund_request: bool = False) -> None:
        self.settle_nowait(plan, admitted_ms=admitted_ms, token_delta=token_delta,
                           spend_delta=spend_delta, lease_id=lease_id, record=record, rates=rates,
                           refund_request=refund_request)

    def settle_nowait(self, plan: Plan, *, admitted_ms: int, token_delta: int, spend_delta: int,
                      lease_id: str | None, record: UsageRecord, rates: bool = True,
                      refund_request: bool = False) -> tuple[bool, Awaitable[None] | None]:
        """Done at once: nothing to wait for."""
        day, month = admitted_ms // DAY_MS, month_of(admitted_ms)
        for s in plan.scopes:
            rpm, tpm, conc, tpd, tpmo, spd, spmo = s.vector
            q, cc = s.keys
            rq, tk = (q, 0), (q, 1)
            if refund_request and rpm != NONE and rq in self._tat:
                self._tat[rq] -= 60_000.0 / rpm  # as settle.lua: the request never reached a model
            if rates and tpm != NONE and token_delta:
                # As settle.lua: a charge may put a full bucket into debt; a refund stops at full.
                now = self._now()
                cur = self._tat.get(tk)
                per = 60_000.0 / tpm
                if token_delta > 0:
                    self._tat[tk] = max(cur if cur is not None else now, now) + token_delta * per
                elif cur is not None:
                    self._tat[tk] = max(cur + token_delta * per, now)
            if conc != NONE and lease_id is not None:
                self._leases[cc].pop(lease_id, None)
            if tpd != NONE or tpmo != NONE or spd != NONE or spmo != NONE:  # (no generator)
                self._charge(self._quota[q], day, 0 if tpd == LIFETIME else month, token_delta, spend_delta)
        self._record(plan.team, record)
        return True, None

    def _record(self, team: str, record: UsageRecord) -> None:
        aggs = self._aggs[(team, record.ts_ms // DAY_MS)]
        hour = record.ts_ms // HOUR_MS
        mins = self._mins.get((team, hour))
        if mins is None:
            for old in [k for k in self._mins if k[0] == team and k[1] < hour - 2]:
                del self._mins[old]
            mins = self._mins[(team, hour)]
        tail = f"{record.model}{SEP}"
        day_base, minute_base = f"{record.key_id}{SEP}{tail}", f"{record.ts_ms // MINUTE_MS}{SEP}{tail}"
        vals = metric_values(record)
        for metric, inc in vals:
            aggs[day_base + metric] += inc
            mins[minute_base + metric] += inc
        keys = dimension_keys_of(record)
        if keys:  # tags, end user, session: by day only, in sums of their own
            dims = self._dims[(team, record.ts_ms // DAY_MS)]
            for dim in keys:
                for metric, inc in vals:
                    dims[f"{dim}{SEP}{tail}{metric}"] += inc
        self._logs[team].append(record)
        if self.journal is not None:
            self.journal(record)

    def refuse_nowait(self, team: str, record: UsageRecord) -> Awaitable[None] | None:
        self._record(team, record)
        return None

    async def count_unauthenticated(self, reason: str, now_ms: int) -> None:
        day, minute = now_ms // DAY_MS, now_ms // MINUTE_MS
        self._unauth[f"d{day}\x1f{reason}"] += 1
        self._unauth[f"m{minute}\x1f{reason}"] += 1
        if len(self._unauth) > 4096:  # minutes older than two hours go
            floor = minute - 120
            for k in [k for k in self._unauth if k[0] == "m" and int(k[1:].split("\x1f")[0]) < floor]:
                del self._unauth[k]

    async def unauthenticated(self, days: list[int], hours: list[int]) -> dict[str, int]:
        want = {f"d{d}" for d in days}
        out = {}
        for k, v in self._unauth.items():
            head = k.split("\x1f")[0]
            if head in want or (head[0] == "m" and int(head[1:]) * MINUTE_MS // HOUR_MS in hours):
                out[k] = v
        return out

    async def minutes(self, team: str, hours: list[int]) -> dict[str, int]:
        out: dict[str, int] = {}
        for h in hours:
            out.update(self._mins.get((team, h), {}))
        return out

    async def cancel(self, plan: Plan, *, ticket: str, tokens: int, spend: int, lease_id: str | None) -> None:
        return None  # an admission here never outlives its caller's wait: nothing to undo

    async def prepare(self) -> None:
        pass

    async def reap(self, team: str, limit: int = 1000) -> int:
        return 0  # one process: a dead replica's reservations died with it

    async def renew(self, leases: list[tuple[Plan, str]], ttl_ms: int,
                    held: Sequence[tuple[Plan, str]] = ()) -> None:
        exp = self._now() + ttl_ms
        for plan, lid in leases:
            for s in plan.scopes:
                slots = self._leases.get(s.keys[1])
                if slots is not None and lid in slots:
                    slots[lid] = exp

    async def get_docs(self, names: list[str]) -> list[dict[str, Any] | None]:
        now = self._now()
        for n in names:
            if self._doc_exp.get(n, now + 1) <= now:
                self._docs.pop(n, None)
                self._doc_exp.pop(n, None)
        return [copy.deepcopy(self._docs.get(n)) for n in names]

    async def claim(self, name: str, ttl_ms: int) -> bool:
        now = self._now()
        if self._doc_exp.get(name, now + 1) > now and name in self._docs:
            return False
        await self.put_doc(name, {}, ttl_ms)
        return True

    async def put_doc(self, name: str, doc: dict[str, Any], ttl_ms: int | None = None) -> None:
        self._docs[name] = copy.deepcopy(doc)
        if ttl_ms is None:
            self._doc_exp.pop(name, None)
            return
        now = self._now()
        if len(self._doc_exp) >= self._sweep_at:  # now and then: expired docs nobody reads again
            for n in [n for n, exp in self._doc_exp.items() if exp <= now]:
                self._docs.pop(n, None)
                del self._doc_exp[n]
            self._sweep_at = max(1024, 2 * len(self._doc_exp))  # amortized: not on every write
        self._doc_exp[name] = now + ttl_ms

    async def add_member(self, set_name: str, member: str) -> None:
        self._sets[set_name].add(member)

    async def members(self, set_name: str) -> set[str]:
        return set(self._sets.get(set_name, ()))

    async def audit_append(self, entry: dict[str, Any]) -> str:
        ms, seq = self._now(), 0
        if ms <= self._audit_last[0]:  # same ms (or a clock step back): still after the last
            ms, seq = self._audit_last[0], self._audit_last[1] + 1
        self._audit_last = (ms, seq)
        aid = audit_id(ms, seq)
        self._audit.append((aid, copy.deepcopy(entry)))
        return aid

    async def audit_read(self, before: str | None, limit: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for aid, entry in reversed(self._audit):
            if before is not None and aid >= before:
                continue
            out.append(copy.deepcopy(entry) | {"id": aid})
            if len(out) >= limit:
                break
        return out

    async def aggregates(self, team: str, days: list[int],
                         dimensions: bool = False) -> dict[int, dict[str, int]]:
        table = self._dims if dimensions else self._aggs
        return {d: dict(table[(team, d)]) for d in days if (team, d) in table}

    async def records(self, team: str, limit: int) -> list[UsageRecord]:
        log = self._logs.get(team)
        return list(reversed(log))[:limit] if log else []

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


assert KINDS[0] == "rpm"  # vector order is shared with the Lua scripts
