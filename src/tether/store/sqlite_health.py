"""Whether the file under an open SQLite store can still be trusted: the path still names the
file the store opened (SQLite keeps writing to a file deleted or replaced under an open
connection, into a file nobody will open again), and its pages read as sound (the error codes
that mean a damaged file, `PRAGMA quick_check`, a cheap read of the paths every append takes).

It owns no connection: `Trust` keeps what a store learnt (why it refuses everything, damage
met) and words the errors; `sqlite.py` acts on it. No text here quotes a stored value.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from tether.errors import CorruptLog, StoreError, StoreUnavailable
from tether.store.base import UNDECODABLE, EventRow, event_from_row, unreadable

log = logging.getLogger("tether.store")

# SQLite's primary result codes for a damaged file: a malformed page, or not a database.
_DAMAGE_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
_PROBLEMS_SHOWN = 5  # quick_check stops after this many problems: the first is what is shown
# The newest rows of the events table and of its (session_id, seq) index: the pages every
# append and every resume of a running session go through. Read and decoded by `ready`.
_SANITY_ROWS = 8
_SANITY_EVENTS = (
    "SELECT session_id, seq, id, time, thread, type, data FROM events "
    f"ORDER BY pos DESC LIMIT {_SANITY_ROWS}"
)
_SANITY_INDEX = (
    "SELECT count(*) FROM (SELECT session_id, seq FROM events "
    f"ORDER BY session_id DESC, seq DESC LIMIT {_SANITY_ROWS})"
)


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """The database file a store opened: its absolute path, device and inode."""

    path: str
    device: int
    inode: int

    @staticmethod
    def of(path: str) -> FileIdentity | None:
        """The file at `path` now; None for a database with no file (in memory)."""
        if path in ("", ":memory:") or path.startswith("file:"):
            return None
        full = os.path.abspath(path)
        stat = os.stat(full)
        return FileIdentity(full, stat.st_dev, stat.st_ino)

    def moved(self) -> str | None:
        """Why the path no longer names this file, if it does not (one `stat`: it is asked
        after every commit). A path that cannot be examined for another reason is not
        called moved here: `unwritable` says so."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return "the database file was deleted"
        except OSError:
            return None
        if stat.st_ino != self.inode or stat.st_dev != self.device:
            return "the database file was replaced by another file"
        return None

    def unwritable(self) -> str | None:
        """Why the file, not moved, cannot be trusted to keep writes, if it cannot: made
        read-only (the connection opened for writing still writes; the next process could
        not), or it cannot be examined."""
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            return f"the database file cannot be examined: {exc.strerror}"
        if not stat.st_mode & 0o222 or not os.access(self.path, os.W_OK):
            return "the database file is read-only"
        return None


def is_damage(exc: BaseException) -> bool:
    """A SQLite error that says the file is damaged, not busy or missing."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in _DAMAGE_CODES


def damage_kind(exc: BaseException) -> str:
    """What was wrong with a stored event, in words that quote nothing stored: a SQLite
    error's own text (it names pages and tables, never values) or a decoding failure's kind."""
    if is_damage(exc):
        return f"a malformed page ({exc})"
    return UNDECODABLE


def quick_check(conn: sqlite3.Connection) -> str | None:
    """`PRAGMA quick_check` (every page of the file read once): None when it finds the file
    sound, else what it found first. Its messages name trees, pages and cells, never values."""
    try:
        rows = [str(r[0]) for r in conn.execute(f"PRAGMA quick_check({_PROBLEMS_SHOWN})")]
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        return f"quick_check could not finish: {exc}"
    if rows == ["ok"]:
        return None
    more = f" (and {len(rows) - 1} more problems)" if len(rows) > 1 else ""
    return f"quick_check found {rows[0][:200]}{more}"


# Past this size, `check_file(whole=False)` (what `tether run` asks before a run) reads only
# the newest pages: a whole check of a million-session file takes 15 s or more.
WHOLE_CHECK_BYTES = 256 << 20


def check_file(path: str, whole: bool) -> str | None:
    """`quick_check` of the file (past `WHOLE_CHECK_BYTES` without `whole`, `sanity_read`) on
    a connection of its own, for a thread of its own: a store's reads go on meanwhile."""
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    check = quick_check if whole or size <= WHOLE_CHECK_BYTES else sanity_read
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout = 10000")
        return check(conn)
    finally:
        conn.close()


def sanity_read(conn: sqlite3.Connection) -> str | None:
    """The newest events, decoded, and the newest entries of their index: a few pages, read
    in well under a millisecond. None when they read as sound, else what was wrong."""
    try:
        for row in conn.execute(_SANITY_EVENTS).fetchall():
            event_from_row(row)
        conn.execute(_SANITY_INDEX).fetchone()
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        return f"the newest events cannot be read: {damage_kind(exc)}"
    except CorruptLog as exc:
        return f"the newest events cannot be read: {damage_kind(exc)}"
    return None


class Trust:
    """What a store learnt about its file: why it refuses everything, once it does (the file
    was deleted or replaced under it), and damage met in it (unready from then on: a damaged
    file does not heal). Words the errors for both."""

    def __init__(self, url: str, path: str) -> None:
        self.url = url
        self.file = FileIdentity.of(path)
        self.failed: str | None = None
        self.damage: str | None = None

    def moved(self) -> str | None:
        return None if self.file is None else self.file.moved()

    def fail(self, reason: str) -> bool:
        """Refuse everything from now on; True the first time only."""
        if self.failed is not None:
            return False
        self.failed = reason
        log.error("store %s: %s; it takes no more writes until restarted", self.url, reason)
        return True

    def refuse_if_failed(self) -> None:
        if self.failed is not None:
            raise self.unavailable()

    def unavailable(self) -> StoreUnavailable:
        return StoreUnavailable(
            f"store {self.url}: {self.failed}; it takes no more writes until it is restarted "
            "on a sound file"
        )

    def unready(self) -> StoreUnavailable | None:
        """Why `ready` fails, the file not moved: made read-only, or damage found."""
        problem = None if self.file is None else self.file.unwritable()
        if problem is not None:
            return StoreUnavailable(f"store {self.url}: {problem}")
        if self.damage is not None:
            return StoreUnavailable(f"store {self.url} is damaged: {self.damage}")
        return None

    def error(self, exc: sqlite3.Error, session_id: str | None = None) -> StoreError:
        """A SQLite error as tether's: damage is `CorruptLog`, anything else a `StoreError`."""
        if is_damage(exc):
            return self.damaged(exc, session_id)
        return StoreError(f"store {self.url}: {exc}")

    def damaged(
        self, exc: BaseException, session_id: str | None, rows: Sequence[EventRow] = ()
    ) -> CorruptLog:
        """Note the damage; the error names the session and the kind of damage, never what is
        stored (another tenant's, maybe, on a torn page). Not logged here: whoever reads
        reports it (a one-line CLI error, an HTTP error, the server's log)."""
        kind = damage_kind(exc)
        if self.damage is None:
            self.damage = f"a read met {kind}"
        if session_id is None:
            return CorruptLog(f"store {self.url} is damaged: {kind}")
        return unreadable(session_id, kind, rows)
