"""The composition root (providers/rows.py ``ROWS``) and core/deployments.py's provider tables say
the same providers: a name the config accepts has a row, and every fact the config keeps about a
provider (its public endpoint, its required and own fields, its body dialect) names a row."""

from __future__ import annotations

from typing import get_args

from switchyard.core.deployments import (
    OPENAI_FAMILY,
    PROVIDER_FIELDS,
    PUBLIC_ENDPOINTS,
    REQUIRED_FIELDS,
    DeploymentConfig,
    ProviderName,
    _wire_dialect,
)
from switchyard.providers.openai.codec import OpenAICodec
from switchyard.providers.rows import ROWS, wire_for


def _dep(provider: str) -> DeploymentConfig:
    return DeploymentConfig(name=f"d-{provider}", provider=provider, base_url="http://upstream.test",
                            model="m", region="us-east-1" if provider == "bedrock" else None,
                            project="p" if provider == "vertex" else None)


def test_every_configurable_provider_has_a_row_and_no_row_is_unreachable() -> None:
    assert set(get_args(ProviderName)) == set(ROWS)


def test_the_config_tables_name_only_rows() -> None:
    assert set(PUBLIC_ENDPOINTS) <= set(ROWS)
    assert set(REQUIRED_FIELDS) <= set(ROWS)
    assert {p for owners in PROVIDER_FIELDS.values() for p in owners} <= set(ROWS)
    assert set(OPENAI_FAMILY) <= set(ROWS)
    # Without a public endpoint a deployment must give base_url: only self-hosted servers and
    # Azure (one resource per customer) are meant to be in that case.
    assert set(ROWS) - set(PUBLIC_ENDPOINTS) == {"vllm", "llamacpp", "mistralrs", "sgp", "azure"}


def test_the_config_dialect_is_the_rows_body_dialect() -> None:
    for name in ROWS:
        dep = _dep(name)
        wire = wire_for(dep)
        assert dep.dialect == _wire_dialect(name)
        if isinstance(wire.codec, OpenAICodec):  # the OpenAI family and the compatible APIs
            assert wire.codec.dialect.name == dep.dialect, name
            assert wire.native_dialect == dep.dialect, name
        else:  # a codec of its own: the provider's own name
            assert dep.dialect == name, name
        if name in OPENAI_FAMILY:
            assert isinstance(wire.codec, OpenAICodec) and wire.name == name, name
