"""The optional Presidio analyzer (the ``presidio`` extra), for names and places no pattern finds.

Imported only when a guard lists the ``presidio`` detector. Its analysis is a CPU-bound model
call: it runs in a worker thread so the event loop keeps serving.
"""

from __future__ import annotations

import functools
from typing import Any

from switchyard.core.errors import install_hint
from switchyard.core.settings import ConfigError

# The entities asked for (Presidio's names); the placeholders are [PERSON_1], [LOCATION_1] ...
ENTITIES = ("PERSON", "LOCATION", "NRP")


@functools.cache
def analyzer() -> Any:
    try:
        from presidio_analyzer import AnalyzerEngine  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise ConfigError("the presidio detector needs the presidio extra: "
                          f"{install_hint('presidio')}") from None
    return AnalyzerEngine()


def find(text: str) -> list[tuple[int, int, str]]:
    """(start, end, entity) of each finding in ``text``."""
    return [(r.start, r.end, r.entity_type) for r in analyzer().analyze(text, entities=list(ENTITIES),
                                                                         language="en")]
