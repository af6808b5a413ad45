"""``GET /metrics``: what the gateway served, in Prometheus' text format (docs/observability.md).

Cheap on the hot path: a finished request finds its label combination's counts with one dict
lookup, adds to them, and finds each histogram's bucket with one ``bisect``; nothing else runs per
request. A scrape sums the combinations into each metric's labels, turns them into metric
families (prometheus-client writes the text) and reads the gauges (in flight, breakers, the
store, the engine) as they are then.

Label values come only from configured names (model groups, deployments, teams, key ids) and the
gateway's own tables (dialects, endpoints, status classes): a caller's made-up model name is the
one value ``unknown``, never a new series. Key ids are labels only with ``metrics.per_key``.

Under ``--workers N`` each worker writes its counters to a file once a second
(``switchyard.http.scrape``) and a scrape of any worker adds up all of them.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from switchyard.core.errors import RateLimited, Unavailable
from switchyard.routing.health import CLOSED

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from switchyard.core.config import Config
    from switchyard.gateway.context import RequestContext
    from switchyard.gateway.pipeline import Gateway

# Seconds: 100 us .. 60 s.
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
           1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)
_N = len(BUCKETS)
_LE = [*(f"{b:g}" for b in BUCKETS), "+Inf"]
_CLASS = {1: "1xx", 2: "2xx", 3: "3xx", 4: "4xx", 5: "5xx"}

# name -> (help, label names); the label values are the keys of the matching dict.
COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "requests": ("Requests served, at their end",
                 ("model", "deployment", "dialect", "endpoint", "status_class", "team")),
    "tokens": ("Tokens charged", ("model", "team", "kind")),
    "spend_usd": ("Spend charged, USD", ("model", "team")),
    "unpriced_requests": ("Requests served by a deployment without a known price (their spend is "
                          "not in spend_usd)", ("model", "team")),
    "limiter_decisions": ("Admission decisions: admitted, or the limit that refused (429), or "
                          "store_unavailable (503)", ("team", "decision")),
    "retries": ("Upstream attempts after a request's first", ("model",)),
    "fallbacks": ("Requests served by a fallback group", ("model", "fallback")),
    "streams_cut": ("Streams that ended before their last event", ("model",)),
    "guardrail_actions": ("Requests a guardrail acted on, by guard, action and direction (never "
                          "what it matched)", ("guardrail", "action", "direction")),
    "cache_requests": ("Requests the response cache saw, by result: hit, miss, stored or bypass",
                       ("model", "team", "result")),
    "cache_saved_usd": ("Spend the response cache's hits saved, USD, at the model's price",
                        ("model", "team")),
}
PER_KEY = ("requests", "tokens", "spend_usd")  # these get a ``key`` label with metrics.per_key
HISTOGRAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "request_duration_seconds": ("Request latency, first byte in to last byte out",
                                 ("model", "deployment", "status_class")),
    "upstream_duration_seconds": ("Time from the first upstream attempt to the answer's end",
                                  ("model", "deployment")),
    "gateway_overhead_seconds": ("Request latency minus upstream time", ("model", "deployment")),
    "time_to_first_byte_seconds": ("Streams: time to the first body byte", ("model", "deployment")),
}
# What an engine backend reports in ``Backend.stats()`` (other keys are ignored).
ENGINE_GAUGES = {
    "queue_depth": "Sequences waiting for a batch slot",
    "batch_size": "Sequences in the running batch",
    "tokens_per_second": "Tokens generated per second, recently",
    "kv_cache_usage": "Share of the KV cache in use (0..1)",
}

Key = tuple[str, ...]
Counts = dict[str, dict[Key, float]]
Hists = dict[str, dict[Key, list[float]]]  # bucket counts (+Inf last but one), then the sum


def _row() -> list[float]:
    return [0.0] * (_N + 2)


def _count(row: list[float] | None, v: float) -> list[float]:
    """``row`` with ``v`` counted in (a new row at the first value)."""
    if row is None:
        row = _row()
    row[bisect_left(BUCKETS, v)] += 1
    row[-1] += v
    return row


class _Series:
    """What the requests of one label combination (model group, deployment, dialect, endpoint,
    status class, team, and the key with ``metrics.per_key``) added up to. A request finds its
    series with one dict lookup and adds to its slots; a scrape sums the series into each
    metric's own labels (``Recorder.tables``). A histogram's row is made at its first value, so
    that, as for a counter at 0, no series shows what never happened."""

    __slots__ = ("admitted", "cache_write", "cached", "completion", "cut", "duration", "overhead", "prompt",
                 "requests", "retries", "spend", "ttfb", "unpriced", "upstream")

    def __init__(self) -> None:
        self.requests = 0
        self.duration = _row()
        self.upstream: list[float] | None = None
        self.overhead: list[float] | None = None
        self.ttfb: list[float] | None = None
        self.admitted = self.retries = self.cut = self.unpriced = 0
        self.prompt = self.completion = self.cached = self.cache_write = 0
        self.spend = 0.0


class Recorder:
    """This process's counters and histograms, added to at each request's end: what every
    request adds, in its label combination's ``_Series``; what only some do (guardrails,
    refusals, fallbacks, the cache), in ``other``, keyed as the metric's labels."""

    def __init__(self, config: Config) -> None:
        self.per_key = config.metrics.per_key
        self.series: dict[Key, _Series] = {}
        self.other: Counts = {name: {} for name in COUNTERS}

    def carry(self, before: Recorder) -> None:
        """Keep ``before``'s counts (a reload: counters never go down)."""
        self.series, self.other = before.series, before.other

    def observe(self, ctx: RequestContext) -> None:
        route, run, p = ctx.route, ctx.run, ctx.principal
        group = route.model.name if route is not None else "unknown"  # a wildcard: its vendor/*
        team = p.team if p is not None else "none"
        status = ctx.status or 499
        key: Key = (group, run.deployment or "none", ctx.dialect or "unknown", ctx.endpoint,
                    _CLASS.get(status // 100, "5xx"), team)
        if self.per_key:
            key += (p.key_id if p is not None else "none",)
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = _Series()
        s.requests += 1
        latency = ctx.latency
        _count(s.duration, latency)  # (made with the series)
        if ctx.guards is not None:
            acted = self.other["guardrail_actions"]
            for g in {(g, a, where) for g, a, _, where in ctx.guards.fired}:
                acted[g] = acted.get(g, 0) + 1
        if p is None or route is None:
            return  # refused before a model was named: nothing more to count
        if ctx.ticket is None:
            self._refused(ctx, team)
            return
        s.admitted += 1
        upstream = ctx.upstream
        if upstream is not None:
            s.upstream = _count(s.upstream, upstream)
            s.overhead = _count(s.overhead, max(latency - upstream, 0.0))
        ttfb = ctx.ttfb
        if ctx.stream and ttfb is not None and status == 200:
            s.ttfb = _count(s.ttfb, ttfb)
        if run.attempts > 1:
            s.retries += run.attempts - 1
        if run.fallback is not None:
            fk = (group, run.fallback)
            fallbacks = self.other["fallbacks"]
            fallbacks[fk] = fallbacks.get(fk, 0) + 1
        if ctx.cut:
            s.cut += 1
        if ctx.cache:
            self._cache(ctx, group, team)
        usage = ctx.usage
        if usage is not None and (usage.prompt_tokens or usage.completion_tokens):
            # cached (read from) and cache_write (written to the prompt cache) are parts of prompt
            s.prompt += usage.prompt_tokens
            s.completion += usage.completion_tokens
            s.cached += usage.cached_tokens
            s.cache_write += usage.cache_write_tokens
            if ctx.unpriced:
                s.unpriced += 1
            s.spend += ctx.spend_usd

    def _cache(self, ctx: RequestContext, group: str, team: str) -> None:
        ck = (group, team, ctx.cache)
        looked = self.other["cache_requests"]
        looked[ck] = looked.get(ck, 0) + 1
        if ctx.cache == "hit" and ctx.ticket is not None:
            # priced at settlement as the ledger's saved_usd is (the catalog's price too)
            saved = self.other["cache_saved_usd"]
            saved[(group, team)] = saved.get((group, team), 0.0) + ctx.ticket.saved_nano / 1e9

    def _refused(self, ctx: RequestContext, team: str) -> None:
        if ctx.admit_at is None:
            return  # refused before admission (a bad request, a model it may not use)
        if isinstance(ctx.error, RateLimited):
            decision = ctx.error.limit or "other"
        elif isinstance(ctx.error, Unavailable):
            decision = "store_unavailable"
        else:
            decision = "error"
        d = self.other["limiter_decisions"]
        d[(team, decision)] = d.get((team, decision), 0) + 1

    def tables(self) -> tuple[Counts, Hists]:
        """Every counter and histogram keyed by its own labels (what a scrape exposes)."""
        counts: Counts = {name: dict(rows) for name, rows in self.other.items()}
        hists: Hists = {name: {} for name in HISTOGRAMS}

        def add(name: str, k: Key, v: float) -> None:
            if v:  # a series shows once something was counted
                rows = counts[name]
                rows[k] = rows.get(k, 0) + v

        def merge(name: str, k: Key, row: list[float] | None) -> None:
            if row is not None:
                rows = hists[name]
                have = rows.get(k)
                rows[k] = list(row) if have is None else [a + b for a, b in zip(have, row, strict=True)]

        for key, s in self.series.items():
            group, dep, _, _, cls, team, *extra = key
            counts["requests"][key] = s.requests
            merge("request_duration_seconds", (group, dep, cls), s.duration)
            merge("upstream_duration_seconds", (group, dep), s.upstream)
            merge("gateway_overhead_seconds", (group, dep), s.overhead)
            merge("time_to_first_byte_seconds", (group, dep), s.ttfb)
            add("limiter_decisions", (team, "admitted"), s.admitted)
            add("retries", (group,), s.retries)
            add("streams_cut", (group,), s.cut)
            for kind, n in (("prompt", s.prompt), ("completion", s.completion), ("cached", s.cached),
                            ("cache_write", s.cache_write)):
                add("tokens", (group, team, kind, *extra), n)
            add("unpriced_requests", (group, team), s.unpriced)
            add("spend_usd", (group, team, *extra), s.spend)
        return counts, hists


def gauges(gw: Gateway) -> dict[str, dict[Key, float]]:
    """This process's gauges now: requests in flight, breakers, engines, the store's backlog.
    (Summed over workers, except ``MAX_GAUGES``: the largest worker's value.)"""
    now = time.monotonic()
    out: dict[str, dict[Key, float]] = {
        "requests_in_flight": {(): gw.inflight},
        "store_backlog": {(): gw.policies.policy.backlog},
        "deployment_in_flight": {}, "circuit_open": {}, "circuit_cooldown_seconds": {},
        "circuit_trips": {}, **{f"engine_{k}": {} for k in ENGINE_GAUGES}}
    for t in gw.router.targets:
        key = (t.name,)
        b = t.health.breaker
        out["deployment_in_flight"][key] = t.health.inflight
        out["circuit_open"][key] = 0 if b.state == CLOSED else 1
        out["circuit_cooldown_seconds"][key] = b.retry_in(now)
        out["circuit_trips"][key] = b.trips
        for k, v in t.backend.stats().items():
            if k in ENGINE_GAUGES:
                out[f"engine_{k}"][key] = v
    return out


GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "requests_in_flight": ("Requests between their first byte in and their settlement", ()),
    "store_backlog": ("Settlements waiting for the policy store to answer again", ()),
    "deployment_in_flight": ("Upstream calls in flight per deployment", ("deployment",)),
    "circuit_open": ("Workers whose circuit breaker for the deployment is open or half-open",
                     ("deployment",)),
    "circuit_cooldown_seconds": ("Seconds until an open breaker lets a probe through",
                                 ("deployment",)),
    **{f"engine_{k}": (doc, ("deployment",)) for k, doc in ENGINE_GAUGES.items()},
}
MAX_GAUGES = frozenset({"circuit_cooldown_seconds", *(f"engine_{k}" for k in ENGINE_GAUGES)})
# Gauges that only ever grow: exposed as counters.
GAUGE_COUNTERS = {"circuit_trips": ("Times a deployment's circuit breaker opened", ("deployment",))}


class Snapshot:
    """Counters, histograms and gauges of one or several processes, added up."""

    def __init__(self) -> None:
        self.counts: Counts = {name: {} for name in COUNTERS}
        self.hists: Hists = {name: {} for name in HISTOGRAMS}
        self.gauges: dict[str, dict[Key, float]] = {}

    def add(self, counts: Counts, hists: Hists, gauges: dict[str, dict[Key, float]] | None) -> None:
        for name, rows in counts.items():
            mine = self.counts.setdefault(name, {})
            for k, v in rows.items():
                mine[k] = mine.get(k, 0) + v
        for name, hrows in hists.items():
            hmine = self.hists.setdefault(name, {})
            for k, row in hrows.items():
                have = hmine.get(k)
                hmine[k] = list(row) if have is None else [a + b for a, b in zip(have, row, strict=True)]
        for name, grows in (gauges or {}).items():
            gmine = self.gauges.setdefault(name, {})
            for k, v in grows.items():
                gmine[k] = (max(gmine.get(k, v), v) if name in MAX_GAUGES else gmine.get(k, 0) + v)

    def families(self, per_key: bool, store: tuple[bool, float | None]) -> Iterator[Metric]:
        for name, (doc, labels) in COUNTERS.items():
            names = [*labels, "key"] if per_key and name in PER_KEY else list(labels)
            fam = CounterMetricFamily(f"switchyard_{name}", doc, labels=names)
            for k, v in self.counts.get(name, {}).items():
                fam.add_metric(list(k), v)
            yield fam
        for name, (doc, labels) in HISTOGRAMS.items():
            hfam = HistogramMetricFamily(f"switchyard_{name}", doc, labels=list(labels))
            for k, row in self.hists.get(name, {}).items():
                cum, buckets = 0.0, []
                for le, n in zip(_LE, row[:-1], strict=True):
                    cum += n
                    buckets.append((le, cum))
                hfam.add_metric(list(k), buckets, row[-1])
            yield hfam
        for name, (doc, labels) in GAUGES.items():
            gfam = GaugeMetricFamily(f"switchyard_{name}", doc, labels=list(labels))
            for k, v in self.gauges.get(name, {}).items():
                gfam.add_metric(list(k), v)
            yield gfam
        for name, (doc, labels) in GAUGE_COUNTERS.items():
            cfam = CounterMetricFamily(f"switchyard_{name}", doc, labels=list(labels))
            for k, v in self.gauges.get(name, {}).items():
                cfam.add_metric(list(k), v)
            yield cfam
        yield self._hit_ratio()
        up, rtt = store
        yield GaugeMetricFamily("switchyard_store_up", "1 when the policy store answered the "
                                "scrape's ping in time", value=1 if up else 0)
        if rtt is not None:
            yield GaugeMetricFamily("switchyard_store_ping_seconds",
                                    "Round trip of the scrape's ping to the policy store", value=rtt)


    def _hit_ratio(self) -> Metric:
        """Hits over the requests the cache looked up (hit, miss, stored), per model and team."""
        looked: dict[Key, list[float]] = {}
        for (model, team, result), n in self.counts.get("cache_requests", {}).items():
            if result != "bypass":
                row = looked.setdefault((model, team), [0.0, 0.0])
                row[0] += n if result == "hit" else 0
                row[1] += n
        fam = GaugeMetricFamily("switchyard_cache_hit_ratio", "Response cache hits over lookups "
                                "(hit, miss, stored), since start", labels=["model", "team"])
        for k, (hits, n) in looked.items():
            fam.add_metric(list(k), hits / n if n else 0.0)
        return fam


class Families(Collector):
    """A prometheus-client collector over a finished ``Snapshot`` (one per scrape)."""

    def __init__(self, metrics: Iterable[Metric]) -> None:
        self.metrics = list(metrics)

    def collect(self) -> Iterable[Metric]:
        return self.metrics
