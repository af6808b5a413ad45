"""Prices per model, and costs in nano-USD (integers, so the store adds them exactly)."""

from __future__ import annotations

from switchyard.core.canonical import Usage
from switchyard.core.config import Config
from switchyard.core.settings import Price

_FREE = Price()


def nano_usd(price: Price, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0,
             cache_write_tokens: int = 0) -> int:
    """What the tokens cost at ``price``, in nano-USD. ``prompt_tokens`` has OpenAI's meaning
    (cache reads and writes included); those two are priced at the cache prices when set."""
    # USD per 1M tokens * 1e9 nano-USD / 1e6 tokens = price * 1000 nano-USD per token.
    read = price.cache_read_per_1m if price.cache_read_per_1m is not None else price.prompt_per_1m
    write = price.cache_write_per_1m if price.cache_write_per_1m is not None else price.prompt_per_1m
    plain = max(prompt_tokens - cached_tokens - cache_write_tokens, 0)
    return round(plain * price.prompt_per_1m * 1000 + cached_tokens * read * 1000
                 + cache_write_tokens * write * 1000 + completion_tokens * price.completion_per_1m * 1000)


class Pricing:
    def __init__(self, config: Config) -> None:
        self._by_name: dict[str, Price] = {}
        for m in config.models:
            for name in (m.name, *m.aliases):
                self._by_name[name] = m.price

    def price(self, model: str) -> Price:
        """Exact name or alias, then the model group of a pinned "vendor/model/deployment",
        then the vendor wildcard; unknown models are free."""
        p = self._by_name.get(model)
        if p is None:
            parts = model.split("/")
            p = self._by_name.get("/".join(parts[:2])) or self._by_name.get(f"{parts[0]}/*") or _FREE
        return p

    def cost_nano(self, model: str, prompt_tokens: int, completion_tokens: int) -> int:
        return nano_usd(self.price(model), prompt_tokens, completion_tokens)

    def cost(self, model: str, usage: Usage) -> int:
        return nano_usd(self.price(model), usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
                        usage.cache_write_tokens)
