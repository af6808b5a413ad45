"""The strategies spread load as documented (fixed seeds, so the counts are reproducible)."""

from __future__ import annotations

import random
from collections import Counter

from switchyard.routing import Router
from switchyard.routing.strategies import by_usage, latency, least_busy, weighted
from tests.routing.conftest import config, dep, group

URL = "http://127.0.0.1:9/v1"  # never called


def targets(*deps: dict, strategy: str = "weighted"):
    router = Router(config(group("m/x", *deps, strategy=strategy)))
    return router.resolve("m/x").targets


def test_weighted_follows_the_weights():
    ts = targets(dep("a", URL, weight=3), dep("b", URL, weight=1))
    rng = random.Random(7)
    picks = Counter(weighted(ts, rng).deployment.name for _ in range(2000))
    assert 0.70 <= picks["a"] / 2000 <= 0.80


def test_weighted_equal_weights_use_everyone():
    ts = targets(dep("a", URL), dep("b", URL), dep("c", URL))
    rng = random.Random(1)
    picks = Counter(weighted(ts, rng).deployment.name for _ in range(3000))
    assert all(900 <= picks[n] <= 1100 for n in "abc")


def test_least_busy_prefers_the_idle_one():
    a, b, c = targets(dep("a", URL), dep("b", URL), dep("c", URL))
    a.health.inflight, b.health.inflight, c.health.inflight = 4, 0, 2
    rng = random.Random(3)
    assert all(least_busy([a, b, c], rng) is b for _ in range(200))


def test_least_busy_spreads_ties():
    a, b, c = targets(dep("a", URL), dep("b", URL), dep("c", URL))
    a.health.inflight = 1
    rng = random.Random(3)
    picks = Counter(least_busy([a, b, c], rng).deployment.name for _ in range(1000))
    assert picks["a"] == 0 and 400 <= picks["b"] <= 600


def test_latency_prefers_the_fast_one():
    fast, slow, mid = targets(dep("fast", URL), dep("slow", URL), dep("mid", URL))
    fast.health.observe(0.05)
    slow.health.observe(0.8)
    mid.health.observe(0.3)
    rng = random.Random(11)
    picks = Counter(latency([fast, slow, mid], rng).deployment.name for _ in range(2000))
    # power of two choices: the fastest wins every pair it is in (2/3 of pairs), the slowest none;
    # 5% exploration picks uniformly.
    assert picks["fast"] > 0.6 * 2000
    assert picks["slow"] < 0.05 * 2000
    assert picks["fast"] > picks["mid"] > picks["slow"]


def test_latency_measures_the_unmeasured_first():
    fast, new = targets(dep("fast", URL), dep("new", URL))
    fast.health.observe(0.01)
    rng = random.Random(5)
    picks = Counter(latency([fast, new], rng).deployment.name for _ in range(500))
    assert picks["new"] > 450


def test_usage_stays_under_each_deployments_own_limits():
    a, b = targets(dep("a", URL, rpm=10), dep("b", URL, rpm=100), strategy="usage")
    rng = random.Random(2)
    assert by_usage([a, b], [(9, 0), (50, 0)], rng) is b  # a at 90% of its rpm, b at 50%
    assert by_usage([a, b], [(2, 0), (50, 0)], rng) is a
    assert by_usage([a, b], [(10, 0), (100, 0)], rng) is None  # both full


def test_usage_counts_tokens_against_tpm():
    a, b = targets(dep("a", URL, tpm=1000), dep("b", URL, tpm=5000), strategy="usage")
    rng = random.Random(2)
    assert by_usage([a, b], [(0, 900), (0, 1000)], rng, tokens=50) is b
    assert by_usage([a, b], [(0, 900), (0, 4980)], rng, tokens=50) is a  # b would overflow
