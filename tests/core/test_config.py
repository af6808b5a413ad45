"""A deployment's passthrough allow-lists and fixed headers are checked when the config loads:
a mistake there is a ConfigError naming the field, never a leak at run time."""

from __future__ import annotations

from typing import Any

import pytest

from switchyard.core.config import parse_config
from switchyard.core.settings import ConfigError


def deployment(**dep: Any) -> dict[str, Any]:
    return {"models": [{"name": "v/m", "deployments": [{"name": "d1", "base_url": "http://up/v1", **dep}]}]}


@pytest.mark.parametrize(("dep", "says"), [
    ({"allow_extra_headers": ["Authorization"]}, "never taken from callers"),
    ({"allow_extra_headers": ["proxy-authorization"]}, "never taken from callers"),
    ({"allow_extra_headers": ["host"]}, "never taken from callers"),
    ({"allow_extra_headers": ["x bad"]}, "not a header name"),
    ({"headers": {"x-a": "1\r\nhost: evil"}}, "headers.x-a"),
    ({"headers": {"x a": "1"}}, "headers.x a"),
])
def test_unsafe_passthrough_config_is_refused(dep: dict[str, Any], says: str):
    with pytest.raises(ConfigError) as e:
        parse_config(deployment(**dep))
    assert says in str(e.value) and "models.0.deployments.0" in str(e.value)


def test_safe_passthrough_config_loads(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SY_TEST_HEADER_SECRET", "s3cret")
    cfg = parse_config(deployment(allow_extra_headers=["X-Trace", "*"], allow_extra_params=["priority"],
                                  headers={"api-key": "env:SY_TEST_HEADER_SECRET", "x-org": "o"}))
    d = cfg.models[0].deployments[0]
    assert d.allow_extra_headers == ["x-trace", "*"] and d.allow_extra_params == ["priority"]
    assert d.headers == {"api-key": "s3cret", "x-org": "o"}  # env:NAME read at load, like api_key


def test_nothing_passes_through_by_default():
    d = parse_config(deployment()).models[0].deployments[0]
    assert d.allow_extra_headers == [] and d.allow_extra_params == []


def test_azure_api_version_given_once():
    twice = {"provider": "azure", "base_url": "https://r.openai.azure.com/?api-version=2024-10-21",
             "model": "gpt", "api_version": "2024-10-21"}
    with pytest.raises(ConfigError, match="api-version is given twice"):
        parse_config(deployment(**twice))
    for once in ({**twice, "api_version": None}, {**twice, "base_url": "https://r.openai.azure.com"}):
        parse_config(deployment(**once))


def test_upstream_model_is_the_configured_name_else_the_routes_model_name():
    m = parse_config(deployment()).models[0]
    named = parse_config(deployment(model="gpt-up")).models[0]
    assert m.deployments[0].upstream_model(m.name) == "m"
    assert named.deployments[0].upstream_model(named.name) == "gpt-up"
