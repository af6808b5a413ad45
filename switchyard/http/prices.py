"""``switchyard prices``: each route's price per million tokens and where it came from."""

from __future__ import annotations

from switchyard.core.config import Config
from switchyard.core.prices import Priced, deployment_price
from switchyard.core.settings import Price

HEAD = ("ROUTE", "INPUT", "OUTPUT", "CACHE_READ", "CACHE_WRITE", "SOURCE")


def _usd(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


def _cells(p: Price) -> list[str]:
    cells = [_usd(p.prompt_per_1m), _usd(p.completion_per_1m), _usd(p.cache_read_per_1m),
             _usd(p.cache_write_per_1m)]
    if p.tiers:  # context-length tiers: "3 (>200000: 6)"
        rates = [(t.above_input_tokens, [_usd(t.prompt_per_1m), _usd(t.completion_per_1m),
                                         _usd(t.cache_read_per_1m), _usd(t.cache_write_per_1m)])
                 for t in p.tiers]
        cells = [c + "".join(f" (>{n}: {r[i]})" for n, r in rates) for i, c in enumerate(cells)]
    return cells


def price_table(config: Config) -> str:
    """A row per route (USD per 1M tokens; ``-``: a cache rate the route does not have, charged as
    input). A route whose deployments are priced apart gets a row per deployment under it."""
    rows: list[list[str]] = []
    for m in config.models:
        if m.name.endswith("/*"):
            rows.append([m.name, "", "", "", "", "catalog, per model name at its first request"])
            continue
        found = [(d.name, deployment_price(m, d)) for d in m.deployments]
        described = [(n, _describe(p)) for n, p in found]
        if len({tuple(c) for _, c in described}) == 1:
            rows.append([m.name, *described[0][1]])
        else:
            rows.append([m.name, "", "", "", "", "per deployment:"])
            rows += [[f"  {m.name}/{n}", *c] for n, c in described]
    widths = [max(len(r[i]) for r in [list(HEAD), *rows]) for i in range(len(HEAD))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in [list(HEAD), *rows])


def _describe(p: object) -> list[str]:
    if isinstance(p, Priced):
        source = f"catalog ({p.ref})" if p.source == "catalog" else p.source
        return [*_cells(p.price), source]
    return ["", "", "", "", f"UNPRICED: {getattr(p, 'why', '')}"]
