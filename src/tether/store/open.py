"""Opening a store from its URL: the one place that knows every backend (the protocol in
`base` knows none)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import parse_qsl

from tether.errors import ConfigError
from tether.store.base import Store
from tether.store.memory import MemoryStore
from tether.store.sqlite import SQLITE_SYNCHRONOUS, SQLiteStore

DEFAULT_STORE_URL = "sqlite:///tether.db"


def open_store(url: str) -> Store:
    """`memory:` (tests), `sqlite:///PATH[?synchronous=normal|full]` or a path ending in
    .db/.sqlite (the default), `postgresql://…[?synchronous_commit=…]` (many workers on many
    machines)."""
    backend = backend_of(url)
    if backend == "memory":
        return MemoryStore()
    if backend == "postgres":
        require_postgres(url)
        from tether.store.postgres import PostgresStore

        return PostgresStore(url)
    path = sqlite_path(url)
    if path is not None:
        if not path:
            raise ConfigError(f"store URL {url!r} names no file (try sqlite:///tether.db)")
        return SQLiteStore(path, synchronous=sqlite_synchronous(url))
    raise ConfigError(
        f"cannot open store {url!r}: use memory:, sqlite:///PATH, a path ending in .db "
        "or postgresql://USER:PASSWORD@HOST/DB"
    )


def backend_of(url: str) -> Literal["memory", "postgres"] | None:
    """Whether a store URL names the memory store or PostgreSQL; None for anything else (a
    SQLite file: see `sqlite_path`). What is kept in a store's database (events,
    credentials) is told apart by this and `sqlite_path`, nowhere else."""
    if url in ("memory:", "memory://"):
        return "memory"
    if url.startswith(("postgresql://", "postgres://")):
        return "postgres"
    return None


def require_postgres(url: str) -> None:
    """A `ConfigError` saying which extra to install when the PostgreSQL driver is missing."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"{url.split(':')[0]} stores need: pip install 'tether[postgres]'"
        ) from exc


def sqlite_path(url: str) -> str | None:
    """The file a SQLite store URL names (SQLAlchemy's convention: `sqlite:///` and the path,
    so three slashes for a relative path, four for an absolute one), or a bare path ending
    in .db, .sqlite or .sqlite3; None for a URL of another store. Empty: no file named."""
    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite://").partition("?")[0]
        return path.removeprefix("/")
    if url.endswith((".db", ".sqlite", ".sqlite3")) and "://" not in url:
        return url
    return None


def sqlite_synchronous(url: str) -> str:
    """The `synchronous` a SQLite store URL asks for (`?synchronous=normal|full`, any case):
    NORMAL when it asks for none. Any other parameter or value, or one given twice, is a
    `ConfigError` (never the last one silently winning)."""
    query = url.partition("?")[2] if url.startswith("sqlite://") else ""
    synchronous = None
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key != "synchronous":
            raise ConfigError(
                f"store URL {url!r}: unknown parameter {key!r} (SQLite takes only synchronous)"
            )
        if synchronous is not None:
            raise ConfigError(f"store URL {url!r}: synchronous is given more than once")
        if value.upper() not in SQLITE_SYNCHRONOUS:
            raise ConfigError(
                f"store URL {url!r}: synchronous must be normal or full, not {value!r}"
            )
        synchronous = value.upper()
    return synchronous or "NORMAL"
