"""What a caller sends, checked before it goes anywhere: the body's encoding and JSON, model names,
and the names the gateway repeats back in headers; the warning for what it sent that a backend
will not receive (``unsent_warning``)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.errors import GatewayError, InvalidRequest, UnsupportedMediaType
from switchyard.dialects.anthropic.wire import THINKING_BUDGET
from switchyard.dialects.passthrough import vendor_fields
from switchyard.dialects.reasoning import controls_said
from switchyard.routing import Route, Target

_decode = msgspec.json.decode

# Bodies are JSON. curl's -d sends application/x-www-form-urlencoded and many clients send no
# type at all or text/plain, so those are read as JSON too; anything else is a 415.
_JSON_TYPES = frozenset({"", "application/json", "application/x-www-form-urlencoded", "text/plain"})
MAX_MODEL_NAME = 256
# A model name is printable ASCII without spaces: it becomes part of store keys, usage records,
# log lines and metric labels.
_MODEL = re.compile(rf"[!-~]{{1,{MAX_MODEL_NAME}}}")
_WARNING_NAMES = 8  # at most this many dropped names are listed in x-switchyard-warning


def decode_body(raw: bytes, headers: Mapping[str, str]) -> tuple[Any, GatewayError | None]:
    """(the decoded body, or None; the error to raise once the caller is authenticated)."""
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        return None, UnsupportedMediaType(
            f"Content-Encoding {encoding[:40]!r} is not supported: send the JSON body uncompressed",
            param="content-encoding")
    ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype not in _JSON_TYPES and not ctype.endswith("+json"):
        return None, UnsupportedMediaType(
            f"Content-Type {ctype[:60]!r} is not supported: send application/json", param="content-type")
    try:
        return _decode(raw), None
    except msgspec.ValidationError:  # msgspec's only value check on untyped JSON: numeric range
        return None, InvalidRequest("the request body has a number out of range (JSON numbers must fit "
                                    "a 64-bit float)", param="body")
    except msgspec.DecodeError as e:
        return None, InvalidRequest(f"the request body is not valid JSON: {e}", param="body")
    except UnicodeDecodeError as e:
        return None, InvalidRequest(f"the request body is not valid UTF-8 (byte {e.start})", param="body")
    except RecursionError:
        return None, InvalidRequest("the request body is nested too deeply", param="body")


def model_name(name: str) -> str:
    """``name`` if it can be a model name; a 400 naming ``model`` otherwise."""
    if not _MODEL.fullmatch(name):
        raise InvalidRequest(f"model must be 1 to {MAX_MODEL_NAME} printable ASCII characters without "
                             "spaces", param="model")
    return name


# A model name that no route knows, as a 404's access line shows it: cut short, safe characters
# only; never one that looks like a credential pasted into the wrong field.
SHOWN_MODEL = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9._:/@+-]")
_KEYLIKE = re.compile(r"(?i)(?:sk|pk|rk)[-_]|key[-_]|api[-_]?key|bearer|akia|asia|gh[pousr]_|github_pat_|"
                      r"xox[abprs]-|glpat-|eyj|aiza|.*[a-z0-9]{24}")


def unknown_model_shown(name: str) -> str | None:
    """``name`` (a model no route knows) as logs may show it; None when it looks like a key."""
    if not name or _KEYLIKE.match(name):
        return None
    shown = _UNSAFE.sub("?", name[:SHOWN_MODEL])
    return shown + "..." if len(name) > SHOWN_MODEL else shown


def _shown(names: Sequence[str], width: int) -> tuple[list[str], str]:
    """Names that are the caller's, escaped (printable ASCII only), a few at most; and how many more."""
    shown = [n.encode("ascii", "backslashreplace").decode()[:width].translate(_CONTROL)
             for n in names[:_WARNING_NAMES]]
    return shown, f" and {len(names) - _WARNING_NAMES} more" if len(names) > _WARNING_NAMES else ""


def warning_header(dropped: list[str], what: str = "unknown parameter(s) dropped") -> str:
    """``x-switchyard-warning`` for unknown fields."""
    shown, more = _shown(dropped, 64)
    return f"{what}: " + ", ".join(shown) + more


def left_out_warning(notes: Sequence[str]) -> str:
    """The warning for what the caller's dialect read and no backend here runs: each note names
    the field and why (``tools[3] (web_search): hosted tool not run by this gateway``)."""
    shown, more = _shown(notes, 160)
    return "; ".join(shown) + more


def optional_warning(names: list[str]) -> str:
    """The warning for optional features a translating backend leaves out (thinking, ...)."""
    return warning_header(names, "optional feature(s) this model does not support, left out")


_CONTROL = {c: "?" for c in (*range(32), 127)}


def unsent_warning(req: CanonicalRequest, route: Route) -> str | None:
    """The warning for unknown fields that not every deployment of the route receives, for
    what the caller's API makes optional and a translating deployment leaves out, and for
    what the caller's dialect read but no backend here runs (``left_out``, each with why)."""
    native = req.native
    controls = controls_said(req)
    if not req.extra and not req.left_out and not controls and (native is None or not native.optional):
        return None  # nothing the caller sent can be left out (most requests)
    dropped: set[str] = set()
    unsent: set[str] = set()
    uncarried: set[str] = set()
    for t in route.targets:
        if controls:
            uncarried.update(_controls_left_out(t, controls))
        d = t.deployment
        same = d.backend == "upstream" and d.dialect == req.dialect
        if req.extra:
            kept = vendor_fields(req.extra, d.allow_extra_params) if same else {}
            dropped.update(k for k in req.extra if k not in kept)
        # The native lane (a deployment that speaks the caller's API) forwards the body whole;
        # a translating one leaves out what it does not carry.
        if native is not None and t.native != native.api:
            unsent.update(n for n in native.optional if n not in t.carries)
    said = [warning_header(sorted(dropped))] if dropped else []
    if unsent and native is not None:
        said.append(optional_warning([n for n in native.optional if n in unsent]))
    if uncarried:
        said.append(warning_header([n for n in controls if n in uncarried],
                                   "reasoning control(s) this model does not take, left out"))
    if req.left_out:
        said.append(left_out_warning(req.left_out))
    return "; ".join(said) or None


def _controls_left_out(t: Target, controls: list[str]) -> list[str]:
    """The reasoning controls a target does not send: all but where its row takes them as such
    (OpenAI, Azure), and but the effort where it sends a thinking budget (Claude, Gemini)."""
    if t.caps.reasoning_controls:
        return []
    budget = t.native == "anthropic" or THINKING_BUDGET in t.carries
    return [n for n in controls if not (budget and n.endswith("effort"))]
