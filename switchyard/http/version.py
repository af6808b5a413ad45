"""The installed version, for ``--version``, the start-up line, traces and the OpenAPI document."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from switchyard.core.errors import DISTRIBUTION


def package_version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0+unknown"
