"""The configured guards, resolved once at load: which apply to a (model, team, key), in that order.

``Guardrails.any`` is the one check a request pays when no guard is configured anywhere; otherwise
a request's plan is three dictionary reads, and the plan for a (model, team, key) is built once
and cached (keys made through the admin API have no guards of their own: they get their model's
and team's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from switchyard.core.config import Config
from switchyard.core.guardrails import PRESIDIO, GuardrailConfig
from switchyard.core.settings import ConfigError
from switchyard.guards.detectors import BUILT_IN, Detector, custom

Action = Literal["redact", "block", "log"]
_RANK = {"block": 0, "redact": 1, "log": 2}


@dataclass(frozen=True, slots=True)
class Rule:
    """One configured guard."""

    name: str
    action: Action
    request: bool  # reads the request going up
    response: bool  # reads the answer coming back
    restore: bool
    detectors: tuple[Detector, ...]
    presidio: bool = False  # also ask Presidio (requests only; the presidio extra)
    webhook: str | None = None  # an operator's service asked for a verdict instead
    timeout: float = 2.0
    fail_open: bool = False  # on_error: allow


@dataclass(frozen=True, slots=True)
class Plan:
    """The guards one (model, team, key) runs, in order."""

    rules: tuple[Rule, ...]
    request: tuple[tuple[Detector, Rule], ...] = field(init=False)
    response: tuple[tuple[Detector, Rule], ...] = field(init=False)
    restore: bool = field(init=False)  # some request redaction gives its values back
    presidio: tuple[Rule, ...] = field(init=False)
    ask_request: tuple[Rule, ...] = field(init=False)  # webhooks asked about the request
    ask_response: tuple[Rule, ...] = field(init=False)  # ... and about the answer

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        # Where two guards match the same text, a block wins, then a redaction, then a log; among
        # equals the earlier guard (model, team, key).
        ranked = sorted(self.rules, key=lambda r: _RANK[r.action])
        set_(self, "request", tuple((d, r) for r in ranked if r.request for d in r.detectors))
        set_(self, "response", tuple((d, r) for r in ranked if r.response for d in r.detectors))
        set_(self, "restore", any(r.restore for r in self.rules))
        set_(self, "presidio", tuple(r for r in self.rules if r.presidio))
        set_(self, "ask_request", tuple(r for r in self.rules if r.webhook and r.request))
        set_(self, "ask_response", tuple(r for r in self.rules if r.webhook and r.response))


def rule(g: GuardrailConfig, where: str) -> Rule:
    dets: list[Detector] = []
    for d in g.detectors:
        if d == PRESIDIO:
            continue
        det = BUILT_IN[d] if isinstance(d, str) else custom(d.name, d.pattern)
        if det.span > g.hold:
            raise ConfigError(f"{where}: detector {det.name!r} can span {det.span} characters, more "
                              f"than hold ({g.hold})")
        dets.append(det)
    return Rule(name=g.label, action=g.action, request=g.direction != "response",
                response=g.direction != "request", restore=g.restore, detectors=tuple(dets),
                presidio=PRESIDIO in g.detectors, webhook=g.webhook, timeout=g.timeout,
                fail_open=g.on_error == "allow")


class Guardrails:
    def __init__(self, config: Config) -> None:
        def rules(where: str, gs: list[GuardrailConfig]) -> tuple[Rule, ...]:
            return tuple(rule(g, f"{where}.guardrails.{j}") for j, g in enumerate(gs))

        self.models = {m.name: rules(f"models.{i}", m.guardrails) for i, m in enumerate(config.models)
                       if m.guardrails}
        self.teams = {t.name: rules(f"teams.{i}", t.guardrails) for i, t in enumerate(config.teams)
                      if t.guardrails}
        self.keys = {k.id: rules(f"keys.{i}", k.guardrails) for i, k in enumerate(config.keys)
                     if k.guardrails}
        self.any = bool(self.models or self.teams or self.keys)
        self._plans: dict[tuple[str, str, str], Plan | None] = {}
        if any(r.presidio for rs in (*self.models.values(), *self.teams.values(), *self.keys.values())
               for r in rs):
            from switchyard.guards.presidio import analyzer
            analyzer()  # fails at start, naming the extra, rather than on the first request

    def plan(self, model: str, team: str, key_id: str) -> Plan | None:
        """The guards that apply, model's first, then the team's, then the key's; None for none."""
        at = (model, team, key_id)
        try:
            return self._plans[at]
        except KeyError:
            pass
        rules = (*self.models.get(model, ()), *self.teams.get(team, ()), *self.keys.get(key_id, ()))
        plan = self._plans[at] = Plan(rules) if rules else None
        return plan
