"""`tether db migrate`: creates the schema in an empty database, changes nothing when run
again, and the store it makes is what `open_store` opens for a postgresql:// URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from psycopg import AsyncConnection

from tether.store import open_store
from tether.store.pg_schema import SCHEMA_VERSION
from tether.store.postgres import PostgresStore
from tether.testing.store_conformance import _sample, make_events


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_STORE": ""}
    return subprocess.run(
        [sys.executable, "-m", "tether", *args], capture_output=True, text=True, env=env, timeout=60
    )


async def test_migrate_creates_the_schema_once_and_again_changes_nothing(pg_url: str) -> None:
    status = tether("db", "status", "--store", pg_url, "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["version"] == 0
    first = json.loads(tether("db", "migrate", "--store", pg_url, "--json").stdout)
    assert first["version"] == SCHEMA_VERSION and len(first["applied"]) == SCHEMA_VERSION
    store = PostgresStore(pg_url, auto_migrate=False)
    await store.append("s1", make_events("s1", 1, _sample(2)), 0)
    again = tether("db", "migrate", "--store", pg_url)
    assert again.returncode == 0 and "up to date" in again.stdout, again.stdout
    assert await store.last_seq("s1") == 2  # nothing stored was touched
    await store.close()


async def test_a_database_newer_than_this_tether_is_refused_not_touched(pg_url: str) -> None:
    tether("db", "migrate", "--store", pg_url)
    async with await AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute("INSERT INTO tether_schema (version, description) VALUES (99, 'x')")
    result = tether("db", "migrate", "--store", pg_url)
    assert result.returncode == 2
    assert "schema version 99" in result.stderr and "upgrade tether" in result.stderr


async def test_an_unreachable_server_is_a_one_line_error_without_the_password() -> None:
    result = tether("db", "status", "--store", "postgresql://u:secret@127.0.0.1:1/nothing")
    assert result.returncode == 2
    assert "cannot connect" in result.stderr and "secret" not in result.stderr


async def test_open_store_opens_postgresql_urls(pg_url: str) -> None:
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore)
    await store.append("s1", make_events("s1", 1, _sample(1)), 0)  # migrates on first use
    assert [s.session_id for s in await store.sessions()] == ["s1"]
    await store.close()
