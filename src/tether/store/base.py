"""The event store protocol and the rules every backend shares.

Owns `Store`, `SessionInfo`, batch validation and `open_store(url)`. It does no I/O itself:
the backends (memory, SQLite; PostgreSQL later) do, and all pass `tether.testing`'s suite.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tether.errors import ConfigError, UsageError
from tether.events import Event


@dataclass(frozen=True, slots=True)
class SessionInfo:
    session_id: str
    last_seq: int
    created: str
    updated: str


class Store(Protocol):
    """An append-only log of events per session.

    `append` is atomic per batch. It refuses a batch whose `expected_seq` is not the log's
    last seq (`Conflict`), except a retried batch whose event ids are already stored at
    exactly those seqs, which it accepts once more without writing anything."""

    url: str

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> None: ...

    async def read(self, session_id: str, after_seq: int = 0) -> list[Event]: ...

    async def last_seq(self, session_id: str) -> int: ...

    async def sessions(self, limit: int = 100) -> list[SessionInfo]: ...

    async def close(self) -> None: ...


def check_batch(session_id: str, events: Sequence[Event], expected_seq: int) -> None:
    """Refuse a batch that is malformed whatever the log holds: a usage error, not a conflict."""
    if not events:
        raise UsageError("append needs at least one event")
    for offset, event in enumerate(events, start=1):
        if event.session_id != session_id:
            raise UsageError(
                f"event {event.id} belongs to session {event.session_id}, not {session_id}"
            )
        if event.seq != expected_seq + offset:
            raise UsageError(
                f"event {event.id} has seq {event.seq}; a batch after seq {expected_seq} "
                f"must be numbered from {expected_seq + 1} without gaps"
            )


def is_retry(stored_ids: Sequence[str], batch_ids: Sequence[str]) -> bool:
    """A batch whose ids stand at its seqs already was written by an earlier try of this call."""
    return len(stored_ids) == len(batch_ids) and list(stored_ids) == list(batch_ids)


DEFAULT_STORE_URL = "sqlite:///tether.db"


def open_store(url: str) -> Store:
    """`memory:` (tests), `sqlite:///PATH` or a path ending in .db/.sqlite (the default)."""
    from tether.store.memory import MemoryStore
    from tether.store.sqlite import SQLiteStore

    if url in ("memory:", "memory://"):
        return MemoryStore()
    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite://")
        path = path[1:] if path.startswith("/") and not path.startswith("//") else path
        if not path:
            raise ConfigError(f"store URL {url!r} names no file (try sqlite:///tether.db)")
        return SQLiteStore(path if path != ":memory:" else ":memory:")
    if url.endswith((".db", ".sqlite", ".sqlite3")) and "://" not in url:
        return SQLiteStore(url)
    raise ConfigError(
        f"cannot open store {url!r}: use memory:, sqlite:///PATH or a path ending in .db"
    )
