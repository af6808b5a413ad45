"""UTC timestamps of log lines: the formatted second is remembered, the milliseconds looked up."""

from __future__ import annotations

import datetime as dt

from switchyard.core.logs import iso


def test_iso_is_utc_to_the_millisecond_truncated_across_seconds() -> None:
    assert iso(0.0) == "1970-01-01T00:00:00.000Z"
    assert iso(1795954574.0071) == "2026-11-29T12:16:14.007Z"
    assert iso(1795954574.9996) == "2026-11-29T12:16:14.999Z"  # truncated, never .1000
    assert iso(1795954575.5) == "2026-11-29T12:16:15.500Z"  # the next second, formatted anew
    assert iso(1795954574.25) == "2026-11-29T12:16:14.250Z"  # and back
    for ts in (1.0, 86399.5, 951782400.125, 4102444800.75):  # leap day 2000, year 2100
        want = dt.datetime.fromtimestamp(ts, dt.UTC)
        assert iso(ts) == want.strftime("%Y-%m-%dT%H:%M:%S.") + f"{want.microsecond // 1000:03d}Z"
