"""Who a request's spend is for, besides its key and team: tags (the product feature that made the
call), the end user (the caller's customer) and the session (one agent run).

Read once per request at the edge, validated (a bad value is a 400 naming where it came from),
recorded on its usage record, the ledger and the store's aggregates. The ``x-switchyard-*``
headers are never sent upstream (``core.headers.DENIED_PREFIXES``). Tags are bounded: at most
``MAX_TAGS`` per request, and, with ``usage.tags`` set, only the tags it lists.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from switchyard.core.errors import InvalidRequest

TAGS_HEADER = "x-switchyard-tags"
END_USER_HEADER = "x-switchyard-end-user"
SESSION_HEADER = "x-switchyard-session"
MAX_TAGS = 8
# No commas (the list separator), spaces, quotes or control characters: values go into store
# field names, log lines and CSV cells as they are.
_TAG = re.compile(r"[A-Za-z0-9._:/-]{1,64}")
_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")
_ID_RULE = "at most 128 letters, digits or ._:@/+=-"
_TAG_RULE = "at most 64 letters, digits or ._:/-"


@dataclass(frozen=True, slots=True)
class Attribution:
    tags: tuple[str, ...] = ()
    end_user: str = ""
    session: str = ""


NONE = Attribution()


def _tags(raw: str, param: str, allowed: Collection[str] | None) -> tuple[str, ...]:
    tags = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
    if len(tags) > MAX_TAGS:
        raise InvalidRequest(f"{param}: at most {MAX_TAGS} tags per request, not {len(tags)}", param=param)
    for t in tags:
        if not _TAG.fullmatch(t):
            raise InvalidRequest(f"{param}: each tag is {_TAG_RULE}", param=param)
        if allowed is not None and t not in allowed:
            raise InvalidRequest(f"{param}: tag {t!r} is not one of usage.tags", param=param)
    return tags


def _id(v: Any, param: str) -> str:
    if not isinstance(v, str) or not _ID.fullmatch(v):
        raise InvalidRequest(f"{param} must be {_ID_RULE}", param=param)
    return v


def _body_id(v: Any) -> str:
    """A body's end user as recorded: as sent when plain, else its digest (Claude Code sends a JSON
    object as ``metadata.user_id``; a body field is the caller's API's, never refused here)."""
    if not isinstance(v, str) or not v:
        return ""
    if _ID.fullmatch(v):
        return v
    return "sha256:" + hashlib.sha256(v.encode()).hexdigest()[:32]


def read_attribution(headers: Mapping[str, str], user: str | None, body: Any,
                     allowed_tags: Collection[str] | None) -> Attribution:
    """From the request's headers, its canonical ``user`` (OpenAI ``user``, Anthropic
    ``metadata.user_id``) and body (``safety_identifier``; ``metadata.tags``, a comma list, where
    the caller's API has free-form metadata). The headers win over the body; a header's bad value
    is a 400, a body's end user that is not plain is recorded as its digest."""
    tags_h, user_h = headers.get(TAGS_HEADER), headers.get(END_USER_HEADER)
    session = headers.get(SESSION_HEADER)
    meta = body.get("metadata") if isinstance(body, dict) else None
    body_tags = meta.get("tags") if isinstance(meta, dict) else None
    ident = body.get("safety_identifier") if isinstance(body, dict) else None
    if tags_h is None and user_h is None and session is None and user is None and body_tags is None \
            and ident is None:
        return NONE  # the common case: nothing allocated
    if tags_h is not None:
        tags = _tags(tags_h, TAGS_HEADER, allowed_tags)
    elif isinstance(body_tags, str):
        tags = _tags(body_tags, "metadata.tags", allowed_tags)
    else:
        tags = ()
    end_user = _id(user_h, END_USER_HEADER) if user_h is not None else _body_id(user) or _body_id(ident)
    return Attribution(tags, end_user, _id(session, SESSION_HEADER) if session is not None else "")


# The store's aggregate fields for these dimensions take the key's place ("<key>\x1f<model>\x1f
# <metric>"): "\x1e<dimension>:<value>". \x1e never starts a key id (ids are printable), and the
# scripts give such fields no minute copy.
DIMENSIONS = ("tag", "end_user", "session")
MARK = "\x1e"


def dimension_keys(a: Attribution) -> list[str]:
    """The aggregate "key" parts a request with ``a`` adds to (one per tag, end user, session)."""
    out = [f"{MARK}tag:{t}" for t in a.tags]
    if a.end_user:
        out.append(f"{MARK}end_user:{a.end_user}")
    if a.session:
        out.append(f"{MARK}session:{a.session}")
    return out
