"""Load-balancing strategies: pick one deployment among the healthy candidates.

Each pick is a few attribute reads and one or two random numbers: no allocation beyond a tiny list
for ties, no awaits (the usage strategy's counts are read by the caller beforehand).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from switchyard.routing.resolve import Target

# latency: how often a random candidate is tried instead, so a deployment that was slow once gets
# measured again (otherwise power-of-two-choices between two would starve it forever).
EXPLORE = 0.05


def weighted(cands: Sequence[Target], rng: random.Random) -> Target:
    """Weighted random by ``DeploymentConfig.weight``."""
    total = 0.0
    for t in cands:
        total += t.deployment.weight
    r = rng.random() * total
    for t in cands:
        r -= t.deployment.weight
        if r < 0:
            return t
    return cands[-1]


def least_busy(cands: Sequence[Target], rng: random.Random) -> Target:
    """Fewest requests in flight; ties broken at random so idle deployments share the load."""
    best = min(t.health.inflight for t in cands)
    idle = [t for t in cands if t.health.inflight == best]
    return idle[0] if len(idle) == 1 else idle[int(rng.random() * len(idle))]


def latency(cands: Sequence[Target], rng: random.Random) -> Target:
    """Power of two choices on the EWMA of time-to-first-chunk; an unmeasured deployment counts as
    fastest so it gets measured."""
    n = len(cands)
    if n == 1:
        return cands[0]
    i = int(rng.random() * n)
    if rng.random() < EXPLORE:
        return cands[i]
    j = int(rng.random() * (n - 1))
    j += j >= i  # a second, distinct candidate
    a, b = cands[i], cands[j]
    la, lb = a.health.ewma or 0.0, b.health.ewma or 0.0
    return a if la <= lb else b


def by_usage(cands: Sequence[Target], counts: Sequence[tuple[int, int]], rng: random.Random,
             tokens: int = 0) -> Target | None:
    """Lowest share of its own rpm/tpm used this minute; None when every candidate is at its
    limit. ``counts[i]`` is (requests, tokens) of ``cands[i]``; ``tokens``: what this request
    is expected to add. A deployment without rpm/tpm counts as unused."""
    best: list[Target] = []
    best_score = 2.0
    for t, (reqs, toks) in zip(cands, counts, strict=True):
        d = t.deployment
        if (d.rpm is not None and reqs + 1 > d.rpm) or (d.tpm is not None and toks + tokens > d.tpm):
            continue
        score = max(reqs / d.rpm if d.rpm else 0.0, toks / d.tpm if d.tpm else 0.0)
        if score < best_score:
            best_score, best = score, [t]
        elif score == best_score:
            best.append(t)
    if not best:
        return None
    return best[0] if len(best) == 1 else weighted(best, rng)


PICKERS = {"weighted": weighted, "least_busy": least_busy, "latency": latency}
