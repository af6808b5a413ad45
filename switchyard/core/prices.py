"""Where each deployment's price comes from: ``models[].price`` when typed (an override), free for
the built-in backends, else the ``genai-prices`` catalog by provider and upstream model id; none
found, the deployment is unpriced (its requests are recorded as such, never as a silent $0).

Resolved once per deployment when the config is loaded (and once per model name of a ``vendor/*``
route), never per request. The catalog is the package's bundled data, read offline: updating
prices is a dependency bump.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from switchyard.core.deployments import BUILT_IN_BACKENDS, DeploymentConfig, ModelConfig
from switchyard.core.settings import Price, PriceTier

# Our provider names -> the catalog's. Self-hosted servers (vllm, llamacpp, mistralrs) and SGP
# have no list price: unpriced unless models[].price says.
CATALOG_PROVIDERS: dict[str, str] = {
    "openai": "openai", "azure": "azure", "anthropic": "anthropic", "gemini": "google",
    "vertex": "google", "bedrock": "aws", "mistral": "mistral", "cohere": "cohere",
    "fireworks": "fireworks",
}
FREE = Price()

Source = Literal["catalog", "config", "free"]


@dataclass(frozen=True, slots=True)
class Priced:
    """A deployment's known price and where it came from (``ref``: the catalog's provider/model)."""

    price: Price
    source: Source
    ref: str = ""


@dataclass(frozen=True, slots=True)
class Unpriced:
    """Why a deployment has no price."""

    why: str


def upstream_model(model: ModelConfig, dep: DeploymentConfig, upstream: str | None = None) -> str:
    """The model id the upstream is asked for (a ``vendor/*`` route: the caller's name)."""
    return upstream if upstream is not None else dep.upstream_model(model.name)


def deployment_price(model: ModelConfig, dep: DeploymentConfig,
                     upstream: str | None = None) -> Priced | Unpriced:
    """The price of ``dep`` of ``model``: the override, free, the catalog's, or why there is none."""
    if "price" in model.model_fields_set:
        return Priced(model.price, "config")
    if dep.backend in BUILT_IN_BACKENDS:
        return Priced(FREE, "free")  # runs on the operator's own hardware: $0 is its known price
    name = upstream_model(model, dep, upstream)
    provider = CATALOG_PROVIDERS.get(dep.provider)
    if provider is None:
        return Unpriced(f"provider {dep.provider} has no list price (self-hosted); set models[].price")
    found = catalog_price(provider, name)
    if found is None:
        return Unpriced(f"{provider} model {name!r} is not in the genai-prices catalog; set models[].price")
    return found


@functools.lru_cache(maxsize=4096)
def catalog_price(provider: str, model: str) -> Priced | None:
    """The catalog's current standard price of ``model`` at ``provider`` (None: not listed)."""
    from genai_prices import data_snapshot  # 0.25 s of import: only when a config is priced

    try:
        found, info = data_snapshot.get_snapshot().find_provider_model(model, None, provider, None)
    except LookupError:
        return None
    mp = info.get_prices(dt.datetime.now(dt.UTC))
    keys = {"prompt_per_1m": mp.input_mtok, "completion_per_1m": mp.output_mtok,
            "cache_read_per_1m": mp.cache_read_mtok, "cache_write_per_1m": mp.cache_write_mtok}
    if keys["prompt_per_1m"] is None and keys["completion_per_1m"] is None:
        return None  # priced per request or per second only: not tokens
    starts = sorted({t.start for v in keys.values() for t in getattr(v, "tiers", ())})
    base = {k: _at(v, -1) for k, v in keys.items()}
    tiers = [PriceTier(above_input_tokens=s, **{k: _at(v, s) for k, v in keys.items()}) for s in starts]
    price = Price(**{k: (v if v is not None or k.startswith("cache") else 0.0) for k, v in base.items()},
                  tiers=tiers)
    return Priced(price, "catalog", f"{found.id}/{info.id}")


def _at(v: Any, start: int) -> float | None:
    """A catalog price (a Decimal, or tiered: a base and tiers by input tokens) at the tier that
    begins at ``start`` (-1: the base)."""
    if v is None:
        return None
    if isinstance(v, Decimal):
        return float(v)
    rate = v.base
    for t in v.tiers:
        if t.start <= start:
            rate = t.price
    return float(rate)


def unpriced_routes(models: list[ModelConfig]) -> dict[str, str]:
    """Configured routes (not ``vendor/*``: those are priced per model name) with a deployment that
    cannot be priced: route name -> why."""
    out: dict[str, str] = {}
    for m in models:
        if m.name.endswith("/*"):
            continue
        for d in m.deployments:
            p = deployment_price(m, d)
            if isinstance(p, Unpriced):
                out[m.name] = f"deployment {d.name}: {p.why}"
                break
    return out
