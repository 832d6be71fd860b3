"""The durability a store URL asks for reaches the connection, and a bad value is refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tether.errors import ConfigError
from tether.store import SQLiteStore, open_store
from tether.store.open import sqlite_path
from tether.store.postgres import parse_url


def _synchronous(store: SQLiteStore) -> int:
    assert store._conn is not None and store._reader is not None
    writer = store._conn.execute("PRAGMA synchronous").fetchone()[0]
    reader = store._reader.execute("PRAGMA synchronous").fetchone()[0]
    assert writer == reader
    return int(writer)


@pytest.mark.parametrize(
    ("query", "expected"),
    [("", 1), ("?synchronous=normal", 1), ("?synchronous=full", 2), ("?synchronous=FULL", 2)],
)
async def test_a_sqlite_url_sets_synchronous_on_its_connections(
    tmp_path: Path, query: str, expected: int
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 't.db'}{query}")
    assert isinstance(store, SQLiteStore)
    try:
        assert _synchronous(store) == expected  # 1 is NORMAL, 2 is FULL
        assert store.path == str(tmp_path / "t.db")
    finally:
        await store.close()


async def test_a_full_store_names_its_setting_in_its_url(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 't.db'}?synchronous=full")
    again = open_store(store.url)
    try:
        assert isinstance(again, SQLiteStore)
        assert _synchronous(again) == 2
    finally:
        await store.close()
        await again.close()


def test_the_file_of_a_url_with_parameters_is_the_path_alone(tmp_path: Path) -> None:
    assert sqlite_path("sqlite:///data/t.db?synchronous=full") == "data/t.db"
    assert sqlite_path("sqlite:////abs/t.db?synchronous=normal") == "/abs/t.db"


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("?synchronous=off", "synchronous"),
        ("?synchronous=", "synchronous"),
        ("?synchronous=extra", "synchronous"),
        ("?journal_mode=delete", "journal_mode"),
        ("?synchronous=full&synchronous=normal", "synchronous is given more than once"),
        ("?synchronous=full&synchronous=full", "synchronous is given more than once"),
    ],
)
def test_a_bad_sqlite_durability_is_refused_naming_the_parameter(
    tmp_path: Path, query: str, named: str
) -> None:
    path = tmp_path / "t.db"
    with pytest.raises(ConfigError, match=named):
        open_store(f"sqlite:///{path}{query}")
    assert not path.exists()  # refused before anything was created


def test_a_store_built_in_code_refuses_a_bad_synchronous(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="synchronous"):
        SQLiteStore(str(tmp_path / "t.db"), synchronous="OFF; DROP TABLE x")


async def test_a_full_stores_file_stays_an_ordinary_wal_database(tmp_path: Path) -> None:
    """The setting is per connection, not written into the file."""
    path = tmp_path / "t.db"
    await SQLiteStore(str(path), synchronous="FULL").close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # sqlite3's own default


@pytest.mark.parametrize("value", ["on", "off", "local", "remote_write", "remote_apply", "OFF"])
def test_a_postgres_url_carries_synchronous_commit_as_a_connection_option(value: str) -> None:
    conninfo, size = parse_url(f"postgresql://u:p@h/db?synchronous_commit={value}&pool_size=2")
    assert size == 2
    assert f"options=-c%20synchronous_commit%3D{value.lower()}" in conninfo
    assert "pool_size" not in conninfo


def test_a_postgres_url_keeps_its_own_options_beside_synchronous_commit() -> None:
    conninfo, _ = parse_url("postgresql://h/db?options=-csearch_path%3Dx&synchronous_commit=off")
    assert "options=-csearch_path%3Dx%20-c%20synchronous_commit%3Doff" in conninfo


@pytest.mark.parametrize("value", ["yes", "", "full", "on;"])
def test_a_bad_synchronous_commit_is_refused_naming_the_parameter(value: str) -> None:
    with pytest.raises(ConfigError, match="synchronous_commit"):
        parse_url(f"postgresql://h/db?synchronous_commit={value}")


@pytest.mark.parametrize(
    "query", ["pool_size=2&pool_size=3", "synchronous_commit=on&synchronous_commit=off"]
)
def test_a_postgres_parameter_given_twice_is_refused_not_the_last_one_taken(query: str) -> None:
    with pytest.raises(
        ConfigError, match=r"(pool_size|synchronous_commit) is given more than once"
    ):
        parse_url(f"postgresql://h/db?{query}")
