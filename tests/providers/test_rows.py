"""The composition root (providers/rows.py ``ROWS``) and core/deployments.py's provider tables say
the same providers: a name the config accepts has a row, and every fact the config keeps about a
provider (its public endpoint, its required and own fields, its body dialect) names a row."""

from __future__ import annotations

import dataclasses
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
from switchyard.providers.anthropic import ROW as ANTHROPIC_ROW
from switchyard.providers.aws.converse import CONVERSE
from switchyard.providers.aws.invoke_claude import INVOKE
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


def test_a_row_given_another_codec_has_that_codecs_lanes_never_the_old_ones() -> None:
    # The Anthropic row's native lane and count do not outlive its codec ...
    plain = dataclasses.replace(ANTHROPIC_ROW, codec=CONVERSE)
    assert (plain.native_dialect, plain.native, plain.count) == (None, None, None)
    assert plain.count_target("m") is None and plain.carries == CONVERSE.carries
    # ... and a codec brings its own, counted where the row says
    converse = wire_for(_dep("bedrock"))
    assert converse.carries == CONVERSE.carries and converse.native_dialect is None
    invoke = dataclasses.replace(converse, codec=INVOKE, count_path="/model/{model}/count-tokens")
    assert (invoke.native_dialect, invoke.native, invoke.carries) == ("anthropic", INVOKE.native, None)
    assert invoke.count is not None
    assert (invoke.count.body, invoke.count.read) == (INVOKE.count, INVOKE.counted)
    assert invoke.count_target("a/b") == "/model/a%2Fb/count-tokens"
