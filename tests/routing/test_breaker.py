"""The circuit breaker on an injected clock: no sleeps, no timing assertions."""

from __future__ import annotations

from switchyard.routing.health import CLOSED, HALF_OPEN, OPEN, Breaker, Health


def test_opens_after_consecutive_failures_only():
    b = Breaker(threshold=3, cooldown=10.0)
    b.failure(0.0)
    b.failure(0.0)
    b.success()  # the streak is broken
    b.failure(1.0)
    b.failure(1.0)
    assert b.state == CLOSED and b.allows(1.0)
    b.failure(2.0)
    assert b.state == OPEN
    assert not b.allows(2.0) and not b.allows(11.9)
    assert b.retry_in(5.0) == 7.0


def test_half_open_lets_exactly_one_probe_through():
    b = Breaker(threshold=1, cooldown=10.0)
    b.failure(0.0)
    assert b.allows(10.0)
    b.acquire(10.0)
    assert b.state == HALF_OPEN
    assert not b.allows(10.0)  # the probe is out: everyone else waits
    b.success()
    assert b.state == CLOSED and b.allows(10.0) and b.failures == 0


def test_failed_probe_reopens_for_a_full_cooldown():
    b = Breaker(threshold=5, cooldown=10.0)
    for _ in range(5):
        b.failure(0.0)
    b.acquire(10.0)
    b.failure(10.5)  # one failure is enough in half-open, whatever the threshold
    assert b.state == OPEN and not b.allows(20.0) and b.allows(20.5)


def test_probe_without_verdict_is_released():
    b = Breaker(threshold=1, cooldown=1.0)
    b.failure(0.0)
    b.acquire(1.0)
    assert not b.allows(1.0)
    b.release()  # the caller went away mid-probe
    assert b.allows(1.0)


def test_retry_after_holds_before_the_threshold():
    b = Breaker(threshold=3, cooldown=30.0)
    b.failure(0.0, hold=2.0)
    assert b.state == OPEN and not b.allows(1.9) and b.allows(2.0)
    b.acquire(2.0)
    b.success()
    assert b.state == CLOSED


def test_hold_never_shortens_a_cooldown():
    b = Breaker(threshold=1, cooldown=30.0)
    b.failure(0.0, hold=1.0)
    assert b.retry_in(0.0) == 30.0


def test_zero_cooldown_probes_at_once():
    b = Breaker(threshold=1, cooldown=0.0)
    b.failure(5.0)
    assert b.allows(5.0)


def test_latency_average_moves_toward_new_samples():
    h = Health(3, 1.0)
    assert h.ewma is None
    h.observe(1.0)
    assert h.ewma == 1.0
    h.observe(0.0)
    assert 0.0 < h.ewma < 1.0
