"""The SQLite store's forks (`base.Forks`): the `forks` table, a fork's write, and the read
of any session's log, a fork's prefix read from its ancestors' rows (`lineage.py`).

A fork is its `forks` row (child, parent, at), its own events at seqs from `at + 1`, its
`sessions` row and its catalog row; the parent's snapshot is copied as stored when it is at
`at` or before. Nothing of the parent's log is copied, so a fork of a 100,000-event session
writes what a fork of a 100-event one does. Every row a read returns is named with the
session read (the query selects that id in place of the stored one): the store's cache of
decoded events, keyed by (session id, seq), then never hands one session's event to
another's reader.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from tether.errors import Conflict, SessionNotFound
from tether.events import Event
from tether.store import sqlite_catalog
from tether.store.base import EventRow, ForkLink, Snapshot, event_to_row, is_retry
from tether.store.catalog import CatalogRow
from tether.store.lineage import (
    CHAIN_QUERY,
    Chain,
    Chains,
    chain_of,
    check_fork,
    needs_chain,
    plan,
)
from tether.store.sqlite_format import EVENT_COLUMNS

# `snap_session`, `snap_seq`: the snapshot the fork was made with (its parent's, or one its
# parent had from its own parent), if any; NULL for none.
SCHEMA = """
CREATE TABLE IF NOT EXISTS forks (
    session_id TEXT PRIMARY KEY,
    parent TEXT NOT NULL,
    at INTEGER NOT NULL,
    snap_session TEXT,
    snap_seq INTEGER
);
CREATE INDEX IF NOT EXISTS forks_snapshot
    ON forks (snap_session, snap_seq) WHERE snap_session IS NOT NULL;
CREATE TABLE IF NOT EXISTS fork_snapshots (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    version TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"""

_NO_END = 1 << 62  # past any seq: a stretch with no end
_SELECT = (
    "SELECT ?, " + EVENT_COLUMNS.split(", ", 1)[1] + " FROM events "
    "WHERE session_id = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?"
)
_CHAIN = CHAIN_QUERY.format(forks="forks", p="?")


def checked(
    session_id: str, link: ForkLink, events: Sequence[Event], row: CatalogRow
) -> list[EventRow]:
    """A fork's batch as rows, refused (`UsageError`) when malformed whatever is stored."""
    check_fork(session_id, link, events, row)
    return [event_to_row(e) for e in events]


class Lineage:
    """The forks' chains one store has read (they never change), and the reads and writes
    that follow them. Used from the loop's thread and the reader's: a dict's get and set are
    atomic, and a chain kept twice is the same chain."""

    def __init__(self) -> None:
        self.chains = Chains()

    def chain(self, conn: sqlite3.Connection, session_id: str) -> Chain:
        kept = self.chains.get(session_id)
        if kept is not None:
            return kept
        found = chain_of(session_id, conn.execute(_CHAIN, (session_id,)).fetchall())
        self.chains.keep(session_id, found)
        return found

    def rows(
        self, conn: sqlite3.Connection, session_id: str, after_seq: int, limit: int | None
    ) -> list[EventRow]:
        """The log of `session_id` after `after_seq`, at most `limit` rows, as stored rows
        named with `session_id`: a session that is not a fork (or a fork read past its fork
        point, once its chain is known) in one query."""
        chain = self.chains.get(session_id)
        if chain is None:
            own = _select(conn, session_id, session_id, after_seq, None, limit)
            if not needs_chain(own, after_seq):
                return own
            chain = self.chain(conn, session_id)
            if not chain:
                return own  # a gap no link explains: the log as stored
        out: list[EventRow] = []
        for stretch, start in plan(session_id, chain, after_seq, limit):
            left = None if limit is None else limit - len(out)
            if left == 0:
                break
            out += _select(conn, session_id, stretch.source, start, stretch.hi, left)
        return out

    def write(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        link: ForkLink,
        rows: list[EventRow],
        row: CatalogRow,
    ) -> bool:
        """The fork, inside the group's transaction; False for the same fork retried (nothing
        written). Every refusal is raised before the first write (group_commit.py)."""
        last = _last(conn, session_id)
        if last:
            found = conn.execute(
                "SELECT parent, at FROM forks WHERE session_id = ?", (session_id,)
            ).fetchone()
            stored = conn.execute(
                "SELECT id FROM events WHERE session_id = ? AND seq > ? AND seq <= ? ORDER BY seq",
                (session_id, link.at, link.at + len(rows)),
            ).fetchall()
            same = found is not None and ForkLink(str(found[0]), int(found[1])) == link
            if same and is_retry([r[0] for r in stored], [r[2] for r in rows]):
                return False
            raise Conflict(session_id, 0, last)
        if link.at < 1 or _last(conn, link.parent) < link.at:
            raise SessionNotFound(f"session {link.parent} has no event at seq {link.at}")
        conn.executemany(f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        conn.execute("INSERT INTO sessions VALUES (?, ?)", (session_id, rows[0][3]))
        snap = _usable_snapshot(conn, link.parent, link.at)
        conn.execute(
            "INSERT INTO forks VALUES (?, ?, ?, ?, ?)", (session_id, link.parent, link.at, *snap)
        )
        sqlite_catalog.rewrite(conn, row)
        return True  # its chain is kept when first read, once committed


def _usable_snapshot(
    conn: sqlite3.Connection, parent: str, at: int
) -> tuple[str, int] | tuple[None, None]:
    """The snapshot a fork of `parent` at `at` starts from: the parent's own when at `at` or
    before, else the one it was forked with when that is; (None, None) for none."""
    own = conn.execute(
        "SELECT seq FROM snapshots WHERE session_id = ? AND seq <= ?", (parent, at)
    ).fetchone()
    if own is not None:
        return parent, int(own[0])
    inherited = conn.execute(
        "SELECT snap_session, snap_seq FROM forks WHERE session_id = ? AND snap_seq <= ?",
        (parent, at),
    ).fetchone()
    return (None, None) if inherited is None else (str(inherited[0]), int(inherited[1]))


def put_snapshot(conn: sqlite3.Connection, snapshot: Snapshot) -> None:
    """Keep `snapshot` as its session's newest unless a later one is kept. A snapshot it
    replaces that forks were made with is moved to `fork_snapshots` first, once for all of
    them: so a fork refers to its parent's snapshot rather than copying it (a 100,000-event
    session's is megabytes), and keeps it when the parent moves on."""
    old = conn.execute(
        "SELECT seq FROM snapshots WHERE session_id = ?", (snapshot.session_id,)
    ).fetchone()
    if old is not None and int(old[0]) < snapshot.seq:
        conn.execute(
            "INSERT OR IGNORE INTO fork_snapshots SELECT session_id, seq, version, data "
            "FROM snapshots k WHERE k.session_id = ?1 AND EXISTS (SELECT 1 FROM forks f "
            "WHERE f.snap_session = ?1 AND f.snap_seq = k.seq)",
            (snapshot.session_id,),
        )
    conn.execute(
        "INSERT INTO snapshots VALUES (?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE "
        "SET seq = excluded.seq, version = excluded.version, data = excluded.data "
        "WHERE excluded.seq >= snapshots.seq",
        (snapshot.session_id, snapshot.seq, snapshot.version, bytes(snapshot.data)),
    )


def get_snapshot(conn: sqlite3.Connection, session_id: str) -> Snapshot | None:
    """The session's own newest snapshot; for a fork without one, the one it was forked with
    (named with its id: its bytes are the ancestor's fold, which `snapshots.stored` takes)."""
    found = conn.execute(
        "SELECT seq, version, data FROM snapshots WHERE session_id = ?", (session_id,)
    ).fetchone()
    if found is None:
        ref = conn.execute(
            "SELECT snap_session, snap_seq FROM forks "
            "WHERE session_id = ? AND snap_session IS NOT NULL",
            (session_id,),
        ).fetchone()
        if ref is None:
            return None
        found = conn.execute(
            "SELECT seq, version, data FROM snapshots WHERE session_id = ?1 AND seq = ?2 "
            "UNION ALL SELECT seq, version, data FROM fork_snapshots "
            "WHERE session_id = ?1 AND seq = ?2",
            tuple(ref),
        ).fetchone()
        if found is None:
            return None
    return Snapshot(session_id, int(found[0]), str(found[1]), bytes(found[2]))


def last_seqs(conn: sqlite3.Connection, ids: list[str]) -> dict[str, int]:
    """The last seq of each of the sessions stored: a fork's own rows stand at their seqs
    (from its `at + 1`), so the largest is its last, as for any session."""
    out: dict[str, int] = {}
    for start in range(0, len(ids), 500):  # SQLite caps the number of parameters
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for sid, seq in conn.execute(
            f"SELECT session_id, max(seq) FROM events WHERE session_id IN ({marks}) "
            "GROUP BY session_id",
            chunk,
        ):
            out[sid] = int(seq)
    return out


def _last(conn: sqlite3.Connection, session_id: str) -> int:
    found = conn.execute(
        "SELECT max(seq) FROM events WHERE session_id = ?", (session_id,)
    ).fetchone()[0]
    return 0 if found is None else int(found)


def _select(
    conn: sqlite3.Connection,
    name: str,
    source: str,
    after_seq: int,
    upto: int | None,
    limit: int | None,
) -> list[EventRow]:
    """`source`'s own rows in (`after_seq`, `upto`], named `name`."""
    return conn.execute(
        _SELECT,
        (
            name,
            source,
            after_seq,
            _NO_END if upto is None else upto,
            -1 if limit is None else limit,
        ),
    ).fetchall()
