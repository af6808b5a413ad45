"""The detectors, as data: a name, a bounded pattern, and a validator that turns a shape into a
finding (the Luhn digit of a card, the mod-97 checksum of an IBAN).

Every pattern is bounded (``span``): a stream holds back at most that many characters while a
match may still be growing (``switchyard.guards.scan``). Patterns keep to the syntax both ``re``
(which measures the span) and ``regex`` (which matches, partial matches included) read.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

import regex

from switchyard.core.guardrails import BUILT_IN_DETECTORS, pattern_span


@dataclass(frozen=True, slots=True)
class Detector:
    name: str
    pattern: regex.Pattern[str]
    validate: Callable[[str], bool] | None = None  # None: the shape is the finding
    span: int = 0  # the most characters one match can cover

    @property
    def tag(self) -> str:
        """The placeholder's type: ``[EMAIL_1]``."""
        return re.sub(r"[^A-Z0-9]", "_", self.name.upper())


def detector(name: str, pattern: str, validate: Callable[[str], bool] | None = None) -> Detector:
    span = pattern_span(pattern)
    if span is None:
        raise ValueError(f"detector {name}: its pattern is unbounded")
    return Detector(name, regex.compile(pattern), validate, span)


def _digits(s: str) -> str:
    return "".join(c for c in s if c.isdigit())


def luhn(s: str) -> bool:
    d = _digits(s)
    if not 13 <= len(d) <= 19 or len(set(d)) == 1:
        return False
    total = 0
    for i, c in enumerate(reversed(d)):
        n = int(c) * (2 if i % 2 else 1)
        total += n - 9 if n > 9 else n
    return total % 10 == 0


# ISO 13616 lengths of the countries most often seen; others must be 15 to 34 characters.
_IBAN_LENGTHS = {"AD": 24, "AT": 20, "BE": 16, "CH": 21, "CZ": 24, "DE": 22, "DK": 18, "ES": 24,
                 "FI": 18, "FR": 27, "GB": 22, "IE": 22, "IT": 27, "LU": 20, "NL": 18, "NO": 15,
                 "PL": 28, "PT": 25, "SE": 24}


def iban(s: str) -> bool:
    code = s.replace(" ", "")
    if len(code) != _IBAN_LENGTHS.get(code[:2], len(code)) or not 15 <= len(code) <= 34:
        return False
    moved = code[4:] + code[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def phone(s: str) -> bool:
    n = len(_digits(s))
    return 10 <= n <= 15 if s.startswith("+") else n in (10, 11)


def email(s: str) -> bool:
    local = s.partition("@")[0]
    return not (local.startswith(".") or local.endswith(".") or ".." in s)


def ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s)
    except ValueError:
        return False
    return True


_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_PEM = r"(?:[A-Z0-9]{1,16} ){0,3}PRIVATE KEY-----"
_SECRETS = "|".join((
    r"sk-(?:proj-|svcacct-|admin-|ant-)?[A-Za-z0-9_-]{20,200}",  # OpenAI, Anthropic
    r"(?:sk|rk)_live_[A-Za-z0-9]{24,99}",  # Stripe
    r"(?:AKIA|ASIA)[A-Z0-9]{16}",  # AWS access key ids
    r"AIza[A-Za-z0-9_-]{35}",  # Google API keys
    r"gh[pousr]_[A-Za-z0-9]{36,255}",  # GitHub tokens
    r"github_pat_[A-Za-z0-9_]{22,255}",
    r"xox[abeoprs]-[A-Za-z0-9-]{10,200}",  # Slack tokens
    r"eyJ[A-Za-z0-9_-]{5,1000}\.eyJ[A-Za-z0-9_-]{5,4000}\.[A-Za-z0-9_-]{10,1000}",  # JWTs
))

BUILT_IN: dict[str, Detector] = {d.name: d for d in (
    detector("email", r"(?<![\w.%+-])[A-Za-z0-9._%+-]{1,64}@(?:[A-Za-z0-9-]{1,63}\.){1,8}[A-Za-z]{2,24}"
             r"(?![\w-])", email),
    detector("phone", r"(?<![\w+-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{3}\)|\d{3})[ .-]?\d{3}[ .-]?\d{4}(?![\w-])"
             r"|(?<![\w+-])\+\d{1,3}(?:[ .-]?\d{2,4}){2,5}(?![\w-])", phone),
    detector("payment_card", r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])", luhn),
    detector("iban", r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}"
             r"(?:[A-Z0-9]{11,30}|(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,3})?)(?![A-Za-z0-9])", iban),
    detector("us_ssn", r"(?<![\d-])(?!000|666|9\d\d)\d{3}([- ])(?!00)\d{2}\1(?!0000)\d{4}(?![\d-])"),
    detector("ip_address", rf"(?<![\d.])(?:{_OCTET}\.){{3}}{_OCTET}(?!\d|\.\d)"
             r"|(?<![\w:])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])", ip),
    detector("secret", rf"(?<![A-Za-z0-9_-])(?:{_SECRETS})(?![A-Za-z0-9_-])"
             rf"|-----BEGIN {_PEM}[A-Za-z0-9+/=\s]{{0,8000}}(?:-----END {_PEM})?"),
)}

assert tuple(BUILT_IN) == BUILT_IN_DETECTORS  # core's list names exactly these rows


def custom(name: str, pattern: str) -> Detector:
    return detector(name, pattern)
