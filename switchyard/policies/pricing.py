"""Prices per deployment, and costs in nano-USD (integers, so the store adds them exactly).

Each deployment's price is resolved once (``switchyard.core.prices``): when the config is loaded
for configured routes, on a ``vendor/*`` route's first request for each model name. A request is
charged at the price of the deployment that served it; its reservation at the dearest of its
route's deployments (it is admitted before one is chosen).
"""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.core.canonical import Usage
from switchyard.core.config import Config
from switchyard.core.deployments import ModelConfig
from switchyard.core.prices import Priced, Unpriced, deployment_price
from switchyard.core.settings import Price, PriceRates

COST_HEADER = "x-switchyard-cost"
_WILD_MAX = 10_000  # vendor/* model names remembered; past it the memo starts again


def nano_usd(price: Price, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0,
             cache_write_tokens: int = 0) -> int:
    """What the tokens cost at ``price``, in nano-USD. ``prompt_tokens`` has OpenAI's meaning
    (cache reads and writes included); those two are priced at the cache prices when set. A
    long prompt pays its tier's rates for every token (``Price.tiers``)."""
    r: PriceRates = price.rates(prompt_tokens) if price.tiers else price
    # USD per 1M tokens * 1e9 nano-USD / 1e6 tokens = price * 1000 nano-USD per token.
    read = r.cache_read_per_1m if r.cache_read_per_1m is not None else r.prompt_per_1m
    write = r.cache_write_per_1m if r.cache_write_per_1m is not None else r.prompt_per_1m
    plain = max(prompt_tokens - cached_tokens - cache_write_tokens, 0)
    return round(plain * r.prompt_per_1m * 1000 + cached_tokens * read * 1000
                 + cache_write_tokens * write * 1000 + completion_tokens * r.completion_per_1m * 1000)


def usd_text(nano: int) -> str:
    """nano-USD as USD, exactly, without trailing zeros ("0.0001235", "0")."""
    return f"{nano / 1e9:.9f}".rstrip("0").rstrip(".")


def dearest(prices: list[Price]) -> Price:
    """Each rate at its highest among ``prices`` (tiers too): a reservation that no deployment's
    charge exceeds."""
    if len(prices) == 1:
        return prices[0]

    def top(vals: list[float | None]) -> float | None:
        known = [v for v in vals if v is not None]
        return max(known) if known else None

    def rates(at: int) -> dict[str, float | None]:
        rs = [p.rates(at + 1) for p in prices]
        return {"prompt_per_1m": top([r.prompt_per_1m for r in rs]) or 0.0,
                "completion_per_1m": top([r.completion_per_1m for r in rs]) or 0.0,
                "cache_read_per_1m": top([r.cache_read_per_1m if r.cache_read_per_1m is not None
                                          else r.prompt_per_1m for r in rs]),
                "cache_write_per_1m": top([r.cache_write_per_1m if r.cache_write_per_1m is not None
                                           else r.prompt_per_1m for r in rs])}

    starts = sorted({t.above_input_tokens for p in prices for t in p.tiers})
    tiers = [{"above_input_tokens": s, **rates(s)} for s in starts]
    return Price.model_validate({**rates(-1), "tiers": tiers})


@dataclass(frozen=True, slots=True)
class RoutePrices:
    """One route's prices: per deployment (target name -> price, None: unpriced) and the one its
    requests reserve at."""

    targets: dict[str, Price | None]
    reserve: Price  # the dearest priced deployment's (free when none is priced)
    complete: bool  # every deployment has a price (a spend quota may count the route)
    others: dict[str, Price | None]  # every configured deployment (a fallback served it)
    why: str = ""  # why it is not complete

    def of(self, deployment: str) -> Price | None:
        """The price of the deployment that served (``""``: none did; the route's own)."""
        p = self.targets.get(deployment, _MISSING)
        if p is _MISSING:
            p = self.others.get(deployment, self.reserve if self.complete else None)
        return p

    def cost(self, deployment: str, usage: Usage) -> int | None:
        """``usage`` at the serving deployment's price in nano-USD; None: it has no price."""
        p = self.of(deployment)
        if p is None:
            return None
        return nano_usd(p, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
                        usage.cache_write_tokens)


_MISSING = Price()


class Pricing:
    def __init__(self, config: Config) -> None:
        self._models = {m.name: m for m in config.models}
        self._all: dict[str, Price | None] = {}
        self._routes: dict[str, RoutePrices] = {}
        self._wild: dict[tuple[str, str], RoutePrices] = {}
        for m in config.models:
            if not m.name.endswith("/*"):
                self._routes[m.name] = rp = self._build(m, None)
                self._all.update(rp.targets)

    def _build(self, m: ModelConfig, upstream: str | None) -> RoutePrices:
        found = {f"{m.name}/{d.name}": deployment_price(m, d, upstream) for d in m.deployments}
        targets = {n: p.price if isinstance(p, Priced) else None for n, p in found.items()}
        known = [p for p in targets.values() if p is not None]
        why = next((f"deployment {n.rsplit('/', 1)[1]}: {p.why}" for n, p in found.items()
                    if isinstance(p, Unpriced)), "")
        return RoutePrices(targets, dearest(known) if known else Price(), not why, self._all, why)

    def route(self, model: str, upstream: str | None = None) -> RoutePrices:
        """The prices of route ``model`` (a configured name); of a ``vendor/*`` route, those of
        the model name ``upstream`` under it."""
        if upstream is None:
            rp = self._routes.get(model)
            if rp is not None:
                return rp
            m = self._models.get(model)
            if m is None:  # not a route (a test's made-up name): free and complete, as before
                return _NONE
            upstream = model.split("/", 1)[1]
        rp = self._wild.get((model, upstream))
        if rp is None:
            m = self._models.get(model)
            if m is None:
                return _NONE
            if len(self._wild) >= _WILD_MAX:
                self._wild.clear()
            rp = self._wild[(model, upstream)] = self._build(m, upstream)
        return rp


_NONE = RoutePrices({}, Price(), True, {})
