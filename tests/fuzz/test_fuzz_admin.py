"""Bounded fuzzing of the admin API, as ``test_fuzz`` fuzzes the completion endpoints: random
bodies for every write (known fields with random values, hostile names), random query strings
for the usage reads, hostile bytes. Every answer is below 500 and carries no secret; and whatever
the fuzzer managed to store, listing keys and teams still works afterwards."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.conftest import MASTER, SECRETS, Live
from tests.fuzz.test_fuzz import FUZZ, json_values

LIMIT_FIELDS = ["rpm", "tpm", "max_concurrency", "tokens_per_day", "tokens_per_month", "spend_per_day",
                "spend_per_month", "shrink_max_tokens"]
numbers = (st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False)
           | st.sampled_from([1e300, 1e-320, 0, -1, 2**53 + 1]))
instants = st.sampled_from(["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00",
                            "2027-01-31T00:00:00Z", "2000-01-01T00:00:00Z", "2027-01-31", "yesterday", "",
                            "9" * 5000]) | st.text(max_size=30)
limits = st.dictionaries(st.sampled_from(LIMIT_FIELDS) | st.text(max_size=8), numbers | json_values,
                         max_size=4)
names = (st.sampled_from(["t", "fuzz-team", "k1", "a" * 65, "", "x/y", "caf\u00e9", "0"])
         | st.text(max_size=12))


def body_fields() -> st.SearchStrategy[dict[str, Any]]:
    known = st.fixed_dictionaries({}, optional={
        "team": names | json_values, "id": names | json_values, "models": json_values | st.lists(names),
        "limits": limits | json_values, "expires_at": instants | json_values,
        "grace_seconds": numbers | json_values, "revoked": json_values,
        "model_limits": st.dictionaries(names, limits | json_values, max_size=2) | json_values})
    return st.tuples(known, st.dictionaries(st.text(max_size=8), json_values, max_size=2)).map(
        lambda t: {**t[1], **t[0]})


WRITES = [("POST", "/admin/keys"), ("PATCH", "/admin/keys/{id}"), ("POST", "/admin/keys/{id}/rotate"),
          ("PUT", "/admin/teams/{name}"), ("PATCH", "/admin/teams/{name}")]
READS = ["/admin/usage", "/admin/usage/records", "/admin/keys/{id}", "/admin/teams/{name}"]
QUERY_VALUES = (st.sampled_from(["9999-12-31", "0001-01-01", "2026-11-24T10:00:00Z", "NQ", "5" * 5000,
                                 "2xx,429", "team,key,day", "csv", "-1", "99999999999999999999", "\u2603"])
                | st.text(max_size=20))
QUERY_NAMES = st.sampled_from(["from", "to", "status", "cursor", "limit", "group_by", "format", "team", "key",
                               "model"])


def check(resp: httpx.Response) -> None:
    assert resp.status_code < 500, (resp.request.method, resp.request.url, resp.status_code, resp.text[:300])
    for secret in SECRETS:
        assert secret not in resp.text and secret not in str(resp.headers)
    if resp.status_code >= 400:
        assert resp.json()["error"]["message"]


@pytest.fixture
def admin(live: Live) -> httpx.Client:
    with httpx.Client(base_url=live.url, timeout=10, headers={"authorization": f"Bearer {MASTER}"}) as c:
        yield c  # type: ignore[misc]


@pytest.mark.parametrize(("method", "path"), WRITES)
def test_random_admin_bodies(admin: httpx.Client, method: str, path: str) -> None:
    @FUZZ
    @given(body=body_fields(), who=names)
    def run(body: dict[str, Any], who: str) -> None:
        url = path.format(id=quote(who or "k1", safe=""), name=quote(who or "t", safe=""))
        raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
        check(admin.request(method, url, content=raw, headers={"content-type": "application/json"}))

    run()
    # Whatever was stored: every key and team still lists (a stored value must never break a read).
    for url in ("/admin/keys", "/admin/teams"):
        r = admin.get(url)
        assert r.status_code == 200, r.text[:300]


@pytest.mark.parametrize("path", READS)
def test_random_admin_queries(admin: httpx.Client, path: str) -> None:
    @FUZZ
    @given(query=st.dictionaries(QUERY_NAMES | st.text(max_size=6), QUERY_VALUES, max_size=4), who=names)
    def run(query: dict[str, str], who: str) -> None:
        url = path.format(id=quote(who or "k1", safe=""), name=quote(who or "t", safe=""))
        check(admin.get(url, params=query))

    run()


ADMIN_HOSTILE = [
    b'{"team": "t", "id": "\xff\xfe"}',
    b'{"team": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
    b'{"team": ' + b'{"a":' * 10_000 + b"1" + b"}" * 10_000 + b"}",
    b'{"team": "t", "limits": {"spend_per_day": 1e400}}',
    b'{"team": "t", "limits": {"rpm": NaN}}',
    b"[1, 2]",
    b"null",
    b'"x"',
    b"{",
]


@pytest.mark.parametrize(("method", "path"), WRITES)
@pytest.mark.parametrize("raw", ADMIN_HOSTILE, ids=[f"bytes{i}" for i in range(len(ADMIN_HOSTILE))])
def test_admin_hostile_bytes(admin: httpx.Client, method: str, path: str, raw: bytes) -> None:
    r = admin.request(method, path.format(id="k1", name="t"), content=raw,
                      headers={"content-type": "application/json"})
    check(r)
    assert r.status_code == 400, r.text
