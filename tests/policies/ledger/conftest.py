"""Fixtures for the ledger: ``database_url`` (a fresh database per test) on $DATABASE_URL's server
when set, else on a PostgreSQL the session starts (``tests/policies/ledger/postgres.py``)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.policies.conftest import redis_cluster_url  # noqa: F401 -- the 3-node cluster fixture
from tests.policies.ledger.postgres import postgres


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as up:
        yield up


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    with postgres() as (url, _):
        yield url


def with_db(url: str, name: str) -> str:
    u = urlsplit(url)
    return urlunsplit((u.scheme, u.netloc, "/" + name, u.query, u.fragment))


async def fresh_database(server_url: str) -> str:
    name = "sy_ledger_" + secrets.token_hex(4)
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return with_db(server_url, name)


@pytest.fixture
async def database_url(pg_server_url: str) -> AsyncIterator[str]:
    url = await fresh_database(pg_server_url)
    yield url
    conn = await asyncpg.connect(pg_server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{urlsplit(url).path[1:]}" WITH (FORCE)')
    finally:
        await conn.close()
