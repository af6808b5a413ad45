"""Prices from the genai-prices catalog: a few pinned to its values (a dependency bump that moves
them fails here, on purpose), where each deployment's price comes from, context-length tiers,
and spend quotas over routes without a price."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from switchyard.core.canonical import Usage
from switchyard.core.config import parse_config
from switchyard.core.prices import Priced, Unpriced, catalog_price, deployment_price
from switchyard.core.settings import ConfigError, Price
from switchyard.policies.pricing import Pricing, nano_usd


def rates(p: Price) -> tuple[float, float, float | None, float | None]:
    return p.prompt_per_1m, p.completion_per_1m, p.cache_read_per_1m, p.cache_write_per_1m


def test_known_prices_are_the_catalogs() -> None:
    claude = catalog_price("anthropic", "claude-sonnet-4-5")
    assert claude is not None and claude.source == "catalog" and claude.ref == "anthropic/claude-sonnet-4-5"
    assert rates(claude.price) == (3.0, 15.0, 0.3, 3.75)
    # Past 200k prompt tokens every token pays the long-context rates.
    assert [(t.above_input_tokens, *rates(t)) for t in claude.price.tiers] == [(200_000, 6.0, 22.5, 0.6, 7.5)]
    gpt = catalog_price("openai", "gpt-4o")
    assert gpt is not None and rates(gpt.price) == (2.5, 10.0, 1.25, None) and not gpt.price.tiers
    gemini = catalog_price("google", "gemini-2.5-pro")
    assert gemini is not None and rates(gemini.price) == (1.25, 10.0, 0.125, None)
    tiers = [(t.above_input_tokens, *rates(t)) for t in gemini.price.tiers]
    assert tiers == [(200_000, 2.5, 15.0, 0.25, None)]
    bedrock = catalog_price("aws", "us.anthropic.claude-sonnet-4-20250514-v1:0")
    assert bedrock is not None and rates(bedrock.price) == (3.0, 15.0, 0.3, 3.75)
    assert catalog_price("openai", "no-such-model-anywhere") is None


def model(**kw: Any) -> Any:
    cfg = parse_config({"models": [{"name": "v/m", **kw}]})
    return cfg.models[0]


def test_where_a_deployment_price_comes_from() -> None:
    m = model(deployments=[{"name": "a", "provider": "anthropic", "model": "claude-sonnet-4-5"},
                           {"name": "g", "provider": "vertex", "project": "p", "model": "gemini-2.5-pro"},
                           {"name": "v", "provider": "vllm", "base_url": "http://h:1", "model": "gpt-4o"}])
    a, g, v = (deployment_price(m, d) for d in m.deployments)
    assert isinstance(a, Priced) and a.ref == "anthropic/claude-sonnet-4-5"
    assert isinstance(g, Priced) and g.ref == "google/gemini-2.5-pro"  # Vertex: Google's prices
    assert isinstance(v, Unpriced) and "vllm has no list price" in v.why  # self-hosted: no list price
    typed = model(price={"prompt_per_1m": 1, "completion_per_1m": 2},
                  deployments=[{"name": "v", "provider": "vllm", "base_url": "http://h:1"}])
    p = deployment_price(typed, typed.deployments[0])
    assert isinstance(p, Priced) and p.source == "config" and rates(p.price) == (1, 2, None, None)
    # models[].price overrides the catalog, even at 0 (a negotiated or internal price)
    zero = model(price={"prompt_per_1m": 0},
                 deployments=[{"name": "o", "provider": "openai", "model": "gpt-4o", "api_key": "k"}])
    p = deployment_price(zero, zero.deployments[0])
    assert isinstance(p, Priced) and p.source == "config" and rates(p.price) == (0, 0, None, None)


def test_built_in_backends_are_free_not_unpriced() -> None:
    m = model(deployments=[{"name": "e", "backend": "embedder"}])
    p = deployment_price(m, m.deployments[0])
    assert isinstance(p, Priced) and p.source == "free" and rates(p.price) == (0, 0, None, None)


def test_tiers_price_the_whole_request_at_the_long_context_rate() -> None:
    claude = catalog_price("anthropic", "claude-sonnet-4-5")
    assert claude is not None
    # 200,000 prompt tokens: the base rates; one more: all of them at the tier's.
    assert nano_usd(claude.price, 200_000, 1000) == 200_000 * 3000 + 1000 * 15_000
    assert nano_usd(claude.price, 200_001, 1000, cached_tokens=100_000, cache_write_tokens=1) == (
        100_000 * 6000 + 100_000 * 600 + 1 * 7500 + 1000 * 22_500)


def test_a_route_is_charged_at_the_deployment_that_served_and_reserves_at_the_dearest() -> None:
    cfg = parse_config({"models": [
        {"name": "v/m", "deployments": [
            {"name": "cheap", "provider": "openai", "model": "gpt-4o-mini", "api_key": "k"},
            {"name": "dear", "provider": "openai", "model": "gpt-4o", "api_key": "k"},
            {"name": "self", "provider": "vllm", "base_url": "http://h:1"}]},
        {"name": "openai/*", "deployments": [{"name": "o", "provider": "openai", "api_key": "k"}]}]})
    pricing = Pricing(cfg)
    rp = pricing.route("v/m")
    assert pricing.route("v/m") is rp  # resolved once, at load
    u = Usage(prompt_tokens=1000, completion_tokens=100, cached_tokens=200)
    assert rp.cost("v/m/dear", u) == 800 * 2500 + 200 * 1250 + 100 * 10_000
    assert rp.cost("v/m/cheap", u) == 800 * 150 + 200 * 75 + 100 * 600
    assert rp.cost("v/m/self", u) is None  # unpriced, never a silent 0
    assert not rp.complete and "deployment self" in rp.why
    assert rates(rp.reserve) == (2.5, 10.0, 1.25, 2.5)  # gpt-4o's; an unset cache write costs as input
    wild = pricing.route("openai/*", "gpt-4o")
    assert pricing.route("openai/*", "gpt-4o") is wild and wild.complete
    assert wild.cost("openai/*/o", u) == rp.cost("v/m/dear", u)
    assert pricing.route("openai/*", "made-up-model").cost("openai/*/o", u) is None


def test_a_spend_quota_over_a_route_without_a_price_is_a_config_error() -> None:
    raw: dict[str, Any] = {
        "models": [{"name": "local/n", "deployments": [{"name": "v", "provider": "vllm", "base_url": "http://h:1"}]},
                   {"name": "openai/gpt-4o",
                    "deployments": [{"name": "o", "provider": "openai", "api_key": "k"}]}],
        "teams": [{"name": "t", "limits": {"spend_per_day": 5}}],
        "keys": [{"id": "k", "team": "t", "key": "sk-k"}],
    }
    with pytest.raises(ConfigError, match=r"teams\.0\.limits: a spend quota counts requests in USD, "
                       r"but model local/n has no price \(deployment v: provider vllm has no list price"):
        parse_config(raw)
    # The same quota over priced routes only is fine; so are token quotas over unpriced ones.
    parse_config({**raw, "teams": [{"name": "t", "models": ["openai/gpt-4o"],
                                    "limits": {"spend_per_day": 5}}]})
    parse_config({**raw, "teams": [{"name": "t", "limits": {"tokens_per_day": 5}}]})
    with pytest.raises(ConfigError, match=r"keys\.0\.limits: .* model local/n has no price"):
        parse_config({**raw, "teams": [{"name": "t"}],
                      "keys": [{"id": "k", "team": "t", "key": "sk-k", "limits": {"spend_per_month": 1}}]})


def test_prices_and_check_config_commands(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("""
models:
  - name: anthropic/sonnet
    deployments: [{name: a, provider: anthropic, model: claude-sonnet-4-5}]
  - name: local/typed
    price: {prompt_per_1m: 1, completion_per_1m: 2}
    deployments: [{name: v, provider: vllm, base_url: "http://h:1"}]
  - name: local/none
    deployments: [{name: v, provider: vllm, base_url: "http://h:1"}]
  - name: local/built-in
    deployments: [{name: e, backend: embedder}]
""")
    out = subprocess.run([sys.executable, "-m", "switchyard", "prices", "--config", str(path)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].split() == ["ROUTE", "INPUT", "OUTPUT", "CACHE_READ", "CACHE_WRITE", "SOURCE"]
    rows = {line.split()[0]: line.split() for line in out[1:]}
    assert rows["anthropic/sonnet"] == [
        "anthropic/sonnet", "3", "(>200000:", "6)", "15", "(>200000:", "22.5)", "0.3", "(>200000:", "0.6)",
        "3.75", "(>200000:", "7.5)", "catalog", "(anthropic/claude-sonnet-4-5)"]
    assert rows["local/typed"] == ["local/typed", "1", "2", "-", "-", "config"]
    assert rows["local/built-in"] == ["local/built-in", "0", "0", "-", "-", "free"]
    assert rows["local/none"][1] == "UNPRICED:"
    checked = subprocess.run([sys.executable, "-m", "switchyard", "check-config", str(path)],
                             capture_output=True, text=True, check=True).stdout
    assert "warning: model local/none has no price (deployment v: provider vllm" in checked
    assert "local/typed" not in checked and "anthropic/sonnet" not in checked
