"""``allow_extra_params`` may not name a field the gateway owns: the dialect tables say which
(``passthrough.check_config``, run by check-config and at app start)."""

from __future__ import annotations

import pytest

from switchyard.core.config import parse_config
from switchyard.core.settings import ConfigError
from switchyard.dialects.passthrough import check_config


def config(*allowed: str):
    return parse_config({"models": [{"name": "v/m", "deployments": [
        {"name": "d1", "base_url": "http://up/v1", "allow_extra_params": list(allowed)}]}]})


@pytest.mark.parametrize("field", ["max_tokens", "n_predict", "stream", "max_new_tokens", "messages"])
def test_an_owned_field_is_refused(field: str) -> None:
    with pytest.raises(ConfigError) as e:
        check_config(config("priority", field))
    assert "models.v/m.deployments.d1.allow_extra_params" in str(e.value)
    assert f"{field!r} is set by the gateway" in str(e.value)


def test_vendor_fields_pass() -> None:
    check_config(config("priority", "top_a", "*"))
