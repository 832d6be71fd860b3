"""Whether the file under an open SQLite store can still be trusted: the path still names the
file the store opened (SQLite keeps writing to a file deleted or replaced under an open
connection, into a file nobody will open again), and its pages read as sound (the error codes
that mean a damaged file, `PRAGMA quick_check`, a cheap read of the paths every append takes).

It owns no connection and decides nothing: `sqlite.py` refuses writes, and says it is
unready, on what it finds. No text it returns quotes a stored value.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass

from tether.errors import CorruptLog
from tether.store.base import UNDECODABLE, event_from_row

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
