"""The ``guardrails:`` entries a model, a team or a key may carry (docs/guardrails.md).

Only the shapes and their checks live here, below everything: the detectors themselves are in
``switchyard.guards``. A custom pattern is compiled at load and must be bounded (no ``*``, ``+``
or open ``{n,}``): a stream holds back at most as many characters as the longest pattern can
span, so an unbounded one would let a split match through or hold a whole answer.
"""

from __future__ import annotations

import re
from typing import Literal

import regex
from pydantic import Field, field_validator, model_validator

from switchyard.core.settings import ConfigModel

# The detectors built in (``switchyard.guards.detectors.BUILT_IN`` holds one row per name), and
# the optional Presidio analyzer (the ``presidio`` extra; requests only: it reads whole texts).
BUILT_IN_DETECTORS: tuple[str, ...] = ("email", "phone", "payment_card", "iban", "us_ssn", "ip_address",
                                       "secret")
PRESIDIO = "presidio"
DEFAULT_HOLD = 8192  # characters: the built-in private-key block is the longest span (about 8.3k)
_NAME = r"[a-z][a-z0-9_]{0,31}"


def pattern_span(pattern: str) -> int | None:
    """The most characters ``pattern`` can match, or None when it is unbounded."""
    hi = re._parser.parse(pattern).getwidth()[1]  # type: ignore[attr-defined]
    return None if hi >= 2**31 else int(hi)


class CustomDetector(ConfigModel):
    name: str = Field(..., pattern=_NAME, description="names the placeholder ([NAME_1]) and the records")
    pattern: str = Field(..., min_length=1, description="a bounded regular expression")

    @field_validator("pattern")
    @classmethod
    def _bounded(cls, v: str) -> str:
        try:
            re.compile(v)
            regex.compile(v)  # streams match with the regex module (partial matches)
        except (re.error, regex.error) as e:
            raise ValueError(f"is not a regular expression: {e}") from None
        if pattern_span(v) is None:
            raise ValueError("can match without bound (*, + or {n,}): give every repeat an upper "
                             "bound, e.g. {1,64}, so that a stream's look-behind can hold a whole match")
        if re.compile(v).fullmatch(""):
            raise ValueError("matches the empty string")
        return v


class GuardrailConfig(ConfigModel):
    """One guard: detectors and what to do with their matches, or an operator's webhook."""

    name: str | None = Field(None, pattern=r"[A-Za-z0-9._-]{1,64}",
                             description="in block errors, headers and records; default: the "
                             "detectors' names joined by +, or webhook")
    detectors: list[str | CustomDetector] = Field(default_factory=list)
    action: Literal["redact", "block", "log"] = "redact"
    direction: Literal["request", "response", "both"] = "both"
    restore: bool = Field(False, description="redact only: the upstream sees placeholders, the caller "
                          "gets its own values back")
    hold: int = Field(DEFAULT_HOLD, ge=16, le=65536,
                      description="characters a stream may hold back at most; every detector's "
                      "span must fit")
    webhook: str | None = Field(None, description="an operator's check (docs/guardrails.md)")
    timeout: float = Field(2.0, gt=0, le=60, description="webhook: seconds before on_error applies")
    on_error: Literal["allow", "deny"] = Field("deny", description="webhook: when it fails or is late "
                                               "(allow: fail open; deny: fail closed)")

    @field_validator("detectors")
    @classmethod
    def _known(cls, v: list[str | CustomDetector]) -> list[str | CustomDetector]:
        names: list[str] = []
        for d in v:
            if isinstance(d, str) and d not in (*BUILT_IN_DETECTORS, PRESIDIO):
                raise ValueError(f"unknown detector {d!r} (built in: {', '.join(BUILT_IN_DETECTORS)}, "
                                 f"{PRESIDIO}; or {{name, pattern}})")
            name = d if isinstance(d, str) else d.name
            if name in names:
                raise ValueError(f"detector {name!r} is listed twice")
            names.append(name)
        return v

    @model_validator(mode="after")
    def _consistent(self) -> GuardrailConfig:
        if self.webhook is not None:
            if self.detectors or self.restore:
                raise ValueError("a webhook guard takes no detectors and no restore")
            if not self.webhook.startswith(("http://", "https://")):
                raise ValueError("webhook must be an http:// or https:// URL")
            return self
        if not self.detectors:
            raise ValueError("give detectors (or a webhook)")
        if self.restore and self.action != "redact":
            raise ValueError("restore applies to action redact only")
        if self.restore and self.direction == "response":
            raise ValueError("restore needs direction request or both: it gives back what the "
                             "request's redaction took")
        if PRESIDIO in self.detectors and self.direction != "request":
            raise ValueError("the presidio detector reads whole texts: direction must be request")
        for d in self.detectors:
            if isinstance(d, CustomDetector) and (span := pattern_span(d.pattern) or 0) > self.hold:
                raise ValueError(f"detector {d.name!r} can span {span} characters, more than hold "
                                 f"({self.hold})")
        return self

    @property
    def label(self) -> str:
        if self.webhook is not None:
            return self.name or "webhook"
        return self.name or "+".join(d if isinstance(d, str) else d.name for d in self.detectors)
