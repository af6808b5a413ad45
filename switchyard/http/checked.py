"""A config file as ``switchyard check-config`` validates it: without importing the app, so the
CLI's checks stay quick."""

from __future__ import annotations

from pathlib import Path

from switchyard.core.config import Config, load_config
from switchyard.dialects.passthrough import check_config
from switchyard.guards.rules import Guardrails


def load_checked(path: str | Path) -> Config:
    """The config at ``path``, checked as far as the config alone can say (ConfigError naming
    file, field and reason): what only the dialect tables know (fields a caller may not pass)
    and the detector table (each built-in's span against its guard's hold)."""
    config = load_config(path)
    check_config(config)
    Guardrails(config)
    return config
