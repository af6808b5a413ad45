"""What a usage query asks for, parsed once from ``/admin/usage`` query parameters.

Both usage sources read it: the store's aggregates (``switchyard.policies.usage``) and the ledger
(``switchyard.policies.ledger.query``). Parameters only the ledger can answer are refused by the store
with a 400 naming them (``ledger_only``).
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from switchyard.core.errors import InvalidRequest
from switchyard.policies.attribution import DIMENSIONS

# "minute": the last two hours only (the store and the ledger keep minutes no longer).
STORE_GROUPS = ("team", "key", "model", "day", "minute", "tag", "end_user", "session")
LEDGER_GROUPS = (*STORE_GROUPS, "hour", "deployment", "status", "reason", "guardrail")
MAX_DAYS = 400
MAX_LIMIT = 10_000
_CLASSES = {"1xx": (100, 199), "2xx": (200, 299), "3xx": (300, 399), "4xx": (400, 499),
            "5xx": (500, 599), "error": (400, 999)}


@dataclass(frozen=True, slots=True)
class UsageFilter:
    team: str | None = None
    key: str | None = None
    model: str | None = None
    status: tuple[tuple[int, int], ...] = ()  # inclusive ranges; empty = any
    start: dt.datetime | None = None  # inclusive
    end: dt.datetime | None = None  # exclusive
    start_day: dt.date | None = None  # the UTC days [start_day, end_day] (store aggregates)
    end_day: dt.date | None = None
    instants: bool = False  # from/to were given as instants (the store reads their days)
    group_by: tuple[str, ...] = ()
    limit: int = 100
    cursor: tuple[int, str] | None = None  # (ts in microseconds, ticket id) of the last row seen
    csv: bool = False
    tag: str | None = None
    end_user: str | None = None
    session: str | None = None

    def dimension(self) -> str | None:
        """The one of tag, end_user, session grouped or filtered by (None: none). The store keeps
        each apart, per team, day and model; the ledger combines them."""
        given = [d for d in DIMENSIONS if d in self.group_by or getattr(self, d) is not None]
        return given[0] if given else None
    # Set by the admin API for an actor limited to teams or to its own keys: only these are read.
    teams: tuple[str, ...] | None = None
    keys: tuple[str, ...] | None = None

    def team_list(self) -> list[str] | None:
        """The teams to read (None: every team)."""
        if self.team is not None:
            return [self.team] if self.teams is None or self.team in self.teams else []
        return list(self.teams) if self.teams is not None else None

    def key_ok(self, key: str) -> bool:
        return (self.key is None or key == self.key) and (self.keys is None or key in self.keys)

    def ledger_only(self) -> list[str]:
        """The parameters given that only the ledger can answer."""
        bad = ["status"] if self.status else []
        bad += ["cursor"] if self.cursor else []
        bad += [f"group_by={g}" for g in self.group_by if g not in STORE_GROUPS]
        dims = [d for d in DIMENSIONS if d in self.group_by or getattr(self, d) is not None]
        # The store keeps each of them apart, per team, day and model.
        if len(dims) > 1:
            bad.append(f"{dims[1]} (with {dims[0]})")
        if dims and (self.key or "key" in self.group_by):
            bad.append(f"key (with {dims[0]})")
        if dims and "minute" in self.group_by:
            bad.append(f"group_by=minute (with {dims[0]})")
        return bad


# Dates a query may name: a day is made exclusive by adding one, and instants are moved to UTC,
# neither of which may leave what datetime can hold.
MIN_YEAR, MAX_YEAR = 1970, 9998


def parse_when(s: str, param: str) -> tuple[dt.datetime, bool]:
    """A day (its midnight, UTC) or an RFC 3339 instant; True for an instant."""
    try:
        if len(s) == 10:
            t, instant = dt.datetime.combine(dt.date.fromisoformat(s), dt.time(), dt.UTC), False
        else:
            t = dt.datetime.fromisoformat(s.replace("Z", "+00:00").replace(" ", "+", 1) if "T" in s else s)
            t, instant = (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).astimezone(dt.UTC), True
    except (ValueError, OverflowError):
        raise InvalidRequest(f"{param} must be a date YYYY-MM-DD or an instant like "
                             "2026-11-24T10:00:00Z", param=param) from None
    if not MIN_YEAR <= t.year <= MAX_YEAR:
        raise InvalidRequest(f"{param} must lie in the years {MIN_YEAR} to {MAX_YEAR}", param=param)
    return t, instant


def _status(s: str) -> tuple[tuple[int, int], ...]:
    out = []
    for part in (p.strip().lower() for p in s.split(",") if p.strip()):
        if part in _CLASSES:
            out.append(_CLASSES[part])
        elif len(part) == 3 and part.isdigit() and 100 <= int(part) <= 599:
            out.append((int(part), int(part)))
        else:
            raise InvalidRequest(f"status takes codes (200, 429) and classes (2xx, 4xx, 5xx, error); "
                                 f"not {part!r}", param="status")
    return tuple(out)


def encode_cursor(ts_us: int, ticket: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([ts_us, ticket]).encode()).decode().rstrip("=")


def _cursor(s: str) -> tuple[int, str]:
    try:
        ts, ticket = json.loads(base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))
        if isinstance(ts, int) and 0 <= ts < 1 << 62 and isinstance(ticket, str) and len(ticket) <= 64:
            return ts, ticket
    except (ValueError, TypeError, RecursionError):  # base64, JSON, UTF-8, or not a pair
        pass
    raise InvalidRequest("cursor is not one this API gave (next_cursor)", param="cursor")


def parse_filter(q: Mapping[str, str], *, records: bool = False) -> UsageFilter:
    """From query parameters. Aggregates default to today; raw records to all time."""
    start = end = None
    instants = False
    if q.get("from"):
        start, i = parse_when(q["from"], "from")
        instants |= i
    if q.get("to"):
        end, i = parse_when(q["to"], "to")
        instants |= i
        if not i:
            end += dt.timedelta(days=1)  # a day is inclusive
    if not records:
        # As before the ledger: from defaults to today, to to the end of from's day.
        start = start or dt.datetime.combine(dt.datetime.now(dt.UTC).date(), dt.time(), dt.UTC)
        end = end or dt.datetime.combine(start.date() + dt.timedelta(days=1), dt.time(), dt.UTC)
        if end <= start or (end - start).days > MAX_DAYS:
            raise InvalidRequest(f"from..to must be ordered and span at most {MAX_DAYS} days", param="to")
    elif start and end and end <= start:
        raise InvalidRequest("from must be before to", param="to")
    group_by = tuple(g.strip() for g in (q.get("group_by") or "").split(",") if g.strip())
    bad = [g for g in group_by if g not in LEDGER_GROUPS]
    if bad:
        raise InvalidRequest(f"group_by takes {', '.join(LEDGER_GROUPS)}; not {', '.join(bad)}",
                             param="group_by")
    try:
        limit = min(max(int(q.get("limit") or 100), 1), MAX_LIMIT)
    except ValueError:
        raise InvalidRequest("limit must be an integer", param="limit") from None
    fmt = (q.get("format") or "json").lower()
    if fmt not in ("json", "csv"):
        raise InvalidRequest("format must be json or csv", param="format")
    return UsageFilter(
        team=q.get("team") or None, key=q.get("key") or None, model=q.get("model") or None,
        status=_status(q["status"]) if q.get("status") else (), start=start, end=end,
        start_day=start.date() if start else None,
        end_day=(end - dt.timedelta(microseconds=1)).date() if end else None,
        instants=instants, group_by=group_by, limit=limit,
        cursor=_cursor(q["cursor"]) if q.get("cursor") else None, csv=fmt == "csv",
        tag=q.get("tag") or None, end_user=q.get("end_user") or None, session=q.get("session") or None)


def to_csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return out.getvalue()
