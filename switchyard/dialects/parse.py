"""Read a request body in some dialect into the canonical request.

Rows of the dialect's table write plain canonical fields directly; rows with a dotted target
gather into groups, which ``_ASSEMBLERS`` turn into one canonical value each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from switchyard.core.canonical import CanonicalRequest, Constraint, Dry, Mirostat, RequestKind
from switchyard.core.errors import InvalidRequest
from switchyard.dialects.registry import owned_fields
from switchyard.dialects.sgp import PARAMS_FIELD
from switchyard.dialects.spec import Dialect

Group = dict[str, tuple[Any, str]]  # part -> (value, the dialect's parameter name)


def parse_request(dialect: Dialect, body: Any, *, kind: RequestKind,
                  strict: bool = False) -> CanonicalRequest:
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object", param="body")
    prepared: dict[str, Any] = {}
    if dialect.prepare is not None:
        body, prepared = dialect.prepare(body)
    values: dict[str, Any] = {}
    groups: dict[str, Group] = {}
    extra: dict[str, Any] = {}
    by_name = dialect.by_name
    for name, value in body.items():
        p = by_name.get(name)
        if p is None:
            extra[name] = value
            continue
        if value is None:  # many clients send explicit nulls for "not set"
            continue
        v = p.read(value)
        group, _, part = p.to.partition(".")
        if part:
            groups.setdefault(group, {})[part] = (v, name)
        else:
            values[p.to] = v
    if extra and strict:
        names = ", ".join(sorted(extra))
        raise InvalidRequest(f"unknown parameter(s) for the {dialect.name} dialect: {names}",
                             param=sorted(extra)[0])
    named: dict[str, str] = {}
    for group, parts in groups.items():
        target, value = _ASSEMBLERS[group](parts)
        if value is not None:
            values[target] = value
            named[target] = next(iter(parts.values()))[1]  # the first the body named
    _require(values, kind, dialect)
    req = CanonicalRequest(kind=kind, dialect=dialect.name, extra=extra, named=named or None,
                           **values, **prepared)
    _cross_checks(req)
    return req


def _require(values: dict[str, Any], kind: RequestKind, dialect: Dialect) -> None:
    if "model" not in values:
        raise InvalidRequest("model is required", param="model")
    field = "messages" if kind == "chat" else "prompt"
    if field not in values:
        field = dialect.required.get(field, field)
        raise InvalidRequest(f"{field} is required", param=field)


def _cross_checks(req: CanonicalRequest) -> None:
    for name in req.extra_params or ():
        if name in owned_fields():
            raise InvalidRequest(f"{PARAMS_FIELD} cannot set {name}: the gateway sets it from the "
                                 "request's own fields (validated, and counted against the key's "
                                 "limits); send it there", param=f"{PARAMS_FIELD}.{name}")
    n = req.n or 1
    if req.best_of is not None and req.best_of < n:
        raise InvalidRequest(f"best_of must be greater than or equal to n (got best_of={req.best_of},"
                             f" n={n})", param="best_of")
    if req.stream and req.best_of is not None and req.best_of > n:
        raise InvalidRequest("best_of results cannot be streamed: set stream to false or best_of"
                             " to n", param="best_of")


# --- assemblers: group parts -> (canonical field, value) ------------------------------------


def _one_of(parts: Group, field: str) -> tuple[str, Any]:
    """Aliases of one field (max_tokens / max_new_tokens ...): several may come if they agree.
    When they disagree, the error's ``param`` is the one that contradicts the first (in the
    body's order); the message names all."""
    given = list(parts.values())
    if len(given) == 1:  # the usual case: one name given
        return field, given[0][0]
    first = repr(given[0][0])
    loser = next((name for v, name in given[1:] if repr(v) != first), None)
    if loser is not None:
        names = ", ".join(name for _, name in given)
        raise InvalidRequest(f"give only one of {names} (they disagree)", param=loser)
    return field, given[0][0]


def _mirostat(parts: Group) -> tuple[str, Any]:
    get = {k: v for k, (v, _) in parts.items()}
    mode = get.get("mode")
    if mode is None and ("target" in get or "lr" in get):
        mode = 2  # Fireworks: setting the target turns mirostat (v2) on
    if not mode:
        return "mirostat", None
    tau = get.get("tau", get.get("target", 5.0))
    eta = get.get("eta", get.get("lr", 0.1))
    return "mirostat", Mirostat(mode=int(mode), tau=float(tau), eta=float(eta))


def _dry(parts: Group) -> tuple[str, Any]:
    get = {k: v for k, (v, _) in parts.items()}
    mult = get.get("multiplier")
    if not mult:
        return "dry", None
    kw = {k: get[k] for k in ("base", "allowed_length", "sequence_breakers") if k in get}
    return "dry", Dry(multiplier=float(mult), **kw)


def _logprobs(parts: Group) -> tuple[str, Any]:
    """SGP/chat: ``logprobs: bool`` + ``top_logprobs: int``; SGP also ``return_token_log_probs``,
    and (its SDKs) OpenAI's legacy ``logprobs: int``, the number of alternatives."""
    get = {k: v for k, (v, _) in parts.items()}
    enabled, top = get.get("enabled"), get.get("top")
    if isinstance(enabled, int) and not isinstance(enabled, bool):
        if top is not None and top != enabled:
            raise InvalidRequest("give only one of logprobs (a number) and top_logprobs (they disagree)",
                                 param="top_logprobs")
        return "logprobs", enabled
    enabled = enabled or get.get("tokens")
    if top is not None and not enabled:  # documented: "logprobs must be set to true"
        raise InvalidRequest("top_logprobs requires logprobs to be true", param="top_logprobs")
    if enabled or top is not None:
        return "logprobs", top or 0
    return "logprobs", None


def _constraint(parts: Group) -> tuple[str, Any]:
    given = [(v, name) for v, name in parts.values() if v is not None]
    if len(given) > 1:
        names = sorted(name for _, name in given)
        raise InvalidRequest(f"only one structured-output constraint may be given (got "
                             f"{', '.join(names)})", param=names[1])
    if not given:
        return "constraint", None
    value = given[0][0]
    assert isinstance(value, Constraint)
    return "constraint", value


_ASSEMBLERS: dict[str, Callable[[Group], tuple[str, Any]]] = {
    "max": lambda parts: _one_of(parts, "max_tokens"),
    "stop": lambda parts: _one_of(parts, "stop"),
    "mirostat": _mirostat,
    "dry": _dry,
    "lp": _logprobs,
    "constraint": _constraint,
}
