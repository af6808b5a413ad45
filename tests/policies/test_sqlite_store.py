"""sqlite://: the admin state (documents, sets, the audit trail) outlives the store object and is
seen by a second one on the same file; the counters stay in the process."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from switchyard.policies.factory import open_store
from switchyard.policies.sqlite_store import SqliteStore, default_path, path_of
from switchyard.policies.store import StoreDown


async def test_documents_sets_and_ttls_survive_a_new_store(tmp_path):
    path = tmp_path / "state.db"
    a = SqliteStore(path)
    await a.prepare()
    await a.put_doc("sy:key:abc", {"id": "k1", "revoked": True})
    await a.put_doc("sy:session:1", {"csrf": "x"}, ttl_ms=60_000)
    await a.put_doc("sy:session:2", {"csrf": "y"}, ttl_ms=1)
    await a.add_member("sy:keys", "k1")
    await a.aclose()
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    b = SqliteStore(path)
    await asyncio.sleep(0.01)
    assert await b.get_docs(["sy:key:abc", "sy:session:1", "sy:session:2", "sy:none"]) == [
        {"id": "k1", "revoked": True}, {"csrf": "x"}, None, None]
    assert await b.members("sy:keys") == {"k1"}
    await b.aclose()


async def test_a_second_store_on_the_file_reads_the_first_one_s_writes(tmp_path):
    """An old app still draining after a reload, or a second process: reads go to the file."""
    a, b = SqliteStore(tmp_path / "s.db"), SqliteStore(tmp_path / "s.db")
    await a.put_doc("sy:keyover:strict", {"revoked": True})
    assert await b.get_docs(["sy:keyover:strict"]) == [{"revoked": True}]
    await b.add_member("sy:teams", "ml")
    await b.put_doc("sy:keyover:strict", {"revoked": False})
    assert await a.members("sy:teams") == {"ml"}
    assert await a.get_docs(["sy:keyover:strict"]) == [{"revoked": False}]
    await asyncio.gather(*(x.put_doc(f"sy:d{i}", {"i": i}) for i in range(40) for x in (a, b)))
    assert await a.get_docs([f"sy:d{i}" for i in range(40)]) == [{"i": i} for i in range(40)]
    await a.aclose()
    await b.aclose()


async def test_the_audit_trail_appends_and_pages_newest_first(tmp_path):
    s = SqliteStore(tmp_path / "a.db")
    ids = [await s.audit_append({"action": "key.create", "n": i}) for i in range(5)]
    assert ids == sorted(ids) and len(set(ids)) == 5  # sortable as strings, newest last
    first = await s.audit_read(None, 2)
    assert [e["n"] for e in first] == [4, 3] and first[1]["id"] == ids[3]
    rest = await s.audit_read(first[-1]["id"], 10)
    assert [e["n"] for e in rest] == [2, 1, 0]
    assert await s.audit_read(ids[0], 10) == []
    with pytest.raises(ValueError, match="not an audit entry id"):
        await s.audit_read("1700000000000-0", 10)
    await s.aclose()
    again = SqliteStore(tmp_path / "a.db")
    assert [e["n"] for e in await again.audit_read(None, 10)] == [4, 3, 2, 1, 0]
    assert (await again.audit_append({"n": 5})) > ids[-1]
    await again.aclose()


async def test_no_file_call_runs_on_the_event_loop_thread(tmp_path, monkeypatch):
    s = SqliteStore(tmp_path / "t.db")
    loop_thread = threading.get_ident()
    seen: list[int] = []
    conn = s._conn

    def spy():
        seen.append(threading.get_ident())
        return conn()

    monkeypatch.setattr(s, "_conn", spy)
    await s.put_doc("sy:x", {"a": 1})
    await s.get_docs(["sy:x"])
    await s.add_member("sy:s", "m")
    await s.members("sy:s")
    await s.audit_append({"a": 1})
    await s.audit_read(None, 1)
    assert len(seen) == 6 and loop_thread not in seen
    await s.aclose()


async def test_a_file_that_cannot_be_written_is_store_down_naming_it(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    s = SqliteStore(blocker / "state.db")  # its folder is a file
    await s.prepare()  # never raises; logs
    with pytest.raises(StoreDown, match=r"state file .*file/state\.db"):
        await s.put_doc("sy:x", {})
    await s.aclose()


def test_urls_and_the_default_path(monkeypatch, tmp_path):
    monkeypatch.delenv("SWITCHYARD_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "switchyard" / "state.db"
    assert path_of("sqlite://") == default_path()
    monkeypatch.setenv("SWITCHYARD_HOME", str(tmp_path / "home"))
    assert path_of("sqlite://") == tmp_path / "home" / "state.db"
    assert str(path_of("sqlite:///srv/sy/state.db")) == "/srv/sy/state.db"
    assert str(path_of("sqlite://rel.db")) == "rel.db"
    assert isinstance(open_store("sqlite:///x/y.db"), SqliteStore)
