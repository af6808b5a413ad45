"""The OpenAI codec's request half: a canonical request written in an OpenAI-shaped upstream's dialect.

What the upstream cannot carry is either emulated by the gateway (stop sequences and whether the
stop string stays in the text, echo) or refused with a 400 naming the parameter and the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.errors import InvalidRequest
from switchyard.dialects import passthrough
from switchyard.dialects.chat import chat_emits
from switchyard.dialects.constraints import Unsupported
from switchyard.dialects.defaults import sampling_defaults
from switchyard.dialects.registry import CALLERS, caller_param
from switchyard.dialects.spec import Dialect
from switchyard.providers.emulation import Emulation

_HANDLED = frozenset({"stop", "include_stop_str_in_output", "echo", "include_usage", "extra_params",
                      "extra_headers", "timeout"})
# Defaults for callers that give no provider row (tests, tools): the upstreams that take
# stream_options (asked for usage always, so streams are accounted exactly). The provider rows
# (switchyard/providers/rows.py) say it per row.
_STREAM_USAGE = frozenset({"openai", "vllm", "llamacpp", "mistralrs"})


# Upstreams whose own answer to an overflowing request is the error: overflow "error" needs
# nothing sent (default when no provider row says it).
_OVERFLOW_ERRS = frozenset({"openai", "vllm"})


def render_request(dialect: Dialect, req: CanonicalRequest, upstream_model: str,
                   allow_params: list[str] | None = None, *, stream_usage: bool | None = None,
                   overflow_is_error: bool | None = None) -> tuple[dict[str, Any], Emulation]:
    """The upstream body and what the gateway emulates. ``allow_params``: the deployment's
    ``allow_extra_params`` (what passes through beyond the canonical request). ``stream_usage``
    and ``overflow_is_error``: the provider row's capabilities (default: the dialect's)."""
    if stream_usage is None:
        stream_usage = dialect.name in _STREAM_USAGE
    if overflow_is_error is None:
        overflow_is_error = dialect.name in _OVERFLOW_ERRS
    chat = req.kind == "chat"
    emits = chat_emits(dialect) if chat else dialect.emits
    body: dict[str, Any] = {"model": upstream_model}
    if chat:
        body["messages"] = req.messages
    else:
        body["prompt"] = _prompt(dialect, req)
    emulation = Emulation()
    for field, value in req.said().items():
        if field in _HANDLED:
            continue
        emit = emits.get(field)
        if emit is None:
            if _no_op(req, field, value, overflow_is_error):
                continue
            _refuse(req, field, dialect)
        try:
            body.update(emit(value))
        except Unsupported as e:
            raise InvalidRequest(f"{caller_param(req, field)} ({e}) is not supported by model "
                                 f"{req.model}: its upstream speaks the {dialect.name} dialect",
                                 param=caller_param(req, field)) from None
    _stops(dialect, req, body, emits, emulation)
    # Echo a dialect cannot write is emulated by the driver (provider.py), which clears it for
    # every row without Caps.echo: only a request rendered outside a route gets here with it.
    if req.echo:
        if "echo" not in emits:
            _refuse(req, "echo", dialect)
        body.update(emits["echo"](True))
    if req.stream:
        body["stream"] = True
        if stream_usage:
            body["stream_options"] = {"include_usage": True}
    if req.timeout is not None and "timeout" in emits:
        body.update(emits["timeout"](req.timeout))
    allowed = allow_params or []
    if req.extra_params:  # checked against the deployment's allow-list by its backend
        if "extra_params" in emits:
            body.update(emits["extra_params"](req.extra_params))
        else:  # merged, never over a field the gateway wrote
            body.update({k: v for k, v in req.extra_params.items() if k not in body})
    if req.extra and req.dialect == dialect.name:
        # Vendor extensions reach a server of the caller's own dialect, as far as allowed.
        extras = passthrough.vendor_fields(req.extra, allowed)
        body.update({k: v for k, v in extras.items() if k not in body})
    return body, emulation


def _prompt(dialect: Dialect, req: CanonicalRequest) -> Any:
    prompts = req.prompt or []
    if dialect.name == "sgp":
        if len(prompts) != 1 or not isinstance(prompts[0], str):
            raise InvalidRequest(f"model {req.model} takes one string prompt (its upstream speaks the"
                                 " sgp dialect)", param="prompt")
        return prompts[0]
    if len(prompts) == 1:
        p = prompts[0]
        if isinstance(p, list) and any(isinstance(x, str) for x in p) and dialect.name != "llamacpp":
            raise InvalidRequest(f"a prompt mixing token ids and text is not supported by model "
                                 f"{req.model}", param="prompt")
        return p
    return prompts


def _stops(dialect: Dialect, req: CanonicalRequest, body: dict[str, Any], emits: Mapping[str, Any],
           emulation: Emulation) -> None:
    want = req.include_stop_str_in_output
    if want is None:
        want = bool(sampling_defaults(req.dialect).get("include_stop_str_in_output"))
    if not req.stop:
        return
    caller = CALLERS.get(req.dialect)
    if caller is not None and caller.names_stop:  # only the gateway can tell which one matched
        emulation.stop, emulation.include_stop = list(req.stop), want
        return
    stop_param = dialect.by_name.get("stop") or dialect.by_name.get("stop_sequences")
    fits = "stop" in emits and (stop_param is None or stop_param.max_items is None
                                or len(req.stop) <= stop_param.max_items)
    if fits and "include_stop_str_in_output" in emits:
        body.update(emits["stop"](req.stop))
        body.update(emits["include_stop_str_in_output"](want))
    elif fits and dialect.stop_in_output == want:
        body.update(emits["stop"](req.stop))
    else:
        emulation.stop = list(req.stop)
        emulation.include_stop = want


def _no_op(req: CanonicalRequest, field: str, value: Any, overflow_is_error: bool) -> bool:
    """A value that asks for what the upstream does anyway: nothing to send, nothing to refuse."""
    if field == "best_of":
        return value <= (req.n or 1)
    if field == "overflow":
        return value == "error" and overflow_is_error
    # A caching hint changes no output: a server that cannot take it loses nothing.
    return field == "cache_prompt"


def _refuse(req: CanonicalRequest, field: str, dialect: Dialect) -> NoReturn:
    name = caller_param(req, field)
    # The router honours a truncating policy itself before a body is written (routing/window.py):
    # only a request rendered outside a route gets here.
    how = "; the gateway honours it on a route" \
        if field == "overflow" else ""
    raise InvalidRequest(f"{name} is not supported by model {req.model}: its upstream speaks the "
                         f"{dialect.name} dialect{how}", param=name)
