"""The PostgreSQL store's forks (`base.Forks`): schema version 5 (`tether_forks`, the
`tether_fork` function, the catalog's parent index) and the read of any session's log, a
fork's prefix read from its ancestors' rows (`lineage.py`).

A fork is one statement, as an append is: `tether_fork` writes the child's `tether_sessions`
row (its `last_seq` at `at` plus its own events, so `tether_append` goes on from there), its
link, its own events and its catalog row; refusals come before any write. Nothing of the
parent's log is copied, nor its snapshot: the link names the snapshot the child starts from
(the parent's when at `at` or before, else the one the parent was forked with), and
`tether_put_snapshot` moves a snapshot that forks name to `tether_fork_snapshots` before it
replaces it, once for all of them (sqlite_forks.py does the same).
"""

from __future__ import annotations

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from tether.store.lineage import CHAIN_QUERY, Chain, Chains, chain_of, needs_chain, plan

Conn = AsyncConnection[TupleRow]  # as pg_conn names it (which imports pg_schema, and so this)

V5 = """
CREATE TABLE tether_forks (
    session_id text PRIMARY KEY,
    parent text NOT NULL,
    at bigint NOT NULL,
    snap_session text,  -- the snapshot the fork starts from, if any
    snap_seq bigint
);
CREATE INDEX tether_forks_snapshot ON tether_forks (snap_session, snap_seq)
    WHERE snap_session IS NOT NULL;

-- Snapshots that forks start from, kept when their session's was replaced by a newer one.
CREATE TABLE tether_fork_snapshots (
    session_id text NOT NULL,
    seq bigint NOT NULL,
    version text NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- A session's newest snapshot; the one it replaces moved aside first when forks start from
-- it. The row lock waits out a fork that is naming it (`tether_fork` holds it shared).
CREATE FUNCTION tether_put_snapshot(p_session text, p_seq bigint, p_version text, p_data bytea)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    old bigint;
BEGIN
    SELECT k.seq INTO old FROM tether_snapshots k WHERE k.session_id = p_session FOR UPDATE;
    IF old < p_seq AND EXISTS (SELECT 1 FROM tether_forks f
                               WHERE f.snap_session = p_session AND f.snap_seq = old) THEN
        INSERT INTO tether_fork_snapshots
            SELECT k.session_id, k.seq, k.version, k.data FROM tether_snapshots k
            WHERE k.session_id = p_session
            ON CONFLICT DO NOTHING;
    END IF;
    INSERT INTO tether_snapshots AS k VALUES (p_session, p_seq, p_version, p_data)
        ON CONFLICT (session_id) DO UPDATE SET seq = EXCLUDED.seq,
            version = EXCLUDED.version, data = EXCLUDED.data
        WHERE k.seq <= EXCLUDED.seq;
END $$;

-- A session's forks, by the filter `CatalogQuery.parent`: over forks' rows only, so a step
-- of a session that is not a fork never touches it.
CREATE INDEX tether_catalog_parent
    ON tether_catalog (parent, tenant, updated, session_id) WHERE parent <> '';

-- status: ok | retry (the same fork, written before) | conflict (`actual`: the child's last
-- seq) | missing (the parent has no event at `p_at`).
CREATE FUNCTION tether_fork(
    p_session text, p_parent text, p_at bigint,
    p_ids text[], p_times text[], p_threads text[], p_types text[], p_data text[],
    p_row jsonb
) RETURNS TABLE (status text, actual bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    n integer := cardinality(p_ids);
    stored text[];
    linked boolean;
    snap_s text;
    snap_q bigint;
BEGIN
    IF p_row IS NULL THEN
        RAISE EXCEPTION 'tether_fork needs the session''s catalog row';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM tether_sessions s WHERE s.session_id = p_session) THEN
        -- A log only grows: a parent that holds `p_at` now always will.
        IF p_at < 1 OR coalesce((SELECT s.last_seq FROM tether_sessions s
                                 WHERE s.session_id = p_parent), 0) < p_at THEN
            RETURN QUERY SELECT 'missing'::text, NULL::bigint;
            RETURN;
        END IF;
        INSERT INTO tether_sessions AS s
            VALUES (p_session, p_at + n, p_types[n], p_times[1], p_times[n])
            ON CONFLICT (session_id) DO NOTHING;
        IF FOUND THEN
            SELECT k.session_id, k.seq INTO snap_s, snap_q FROM tether_snapshots k
                WHERE k.session_id = p_parent AND k.seq <= p_at FOR SHARE;
            IF snap_s IS NULL THEN
                SELECT f.snap_session, f.snap_seq INTO snap_s, snap_q FROM tether_forks f
                    WHERE f.session_id = p_parent AND f.snap_seq <= p_at;
            END IF;
            INSERT INTO tether_forks VALUES (p_session, p_parent, p_at, snap_s, snap_q);
            INSERT INTO tether_events
                SELECT p_session, p_at + u.o, u.i, u.t, u.th, u.ty, u.d
                FROM unnest(p_ids, p_times, p_threads, p_types, p_data) WITH ORDINALITY
                    AS u(i, t, th, ty, d, o);
            PERFORM tether_catalog_write(p_row);
            PERFORM pg_notify('tether_news', p_session);
            RETURN QUERY SELECT 'ok'::text, p_at + n;
            RETURN;
        END IF;
    END IF;
    -- The child exists: this fork written before (the same link, the same ids), or not.
    SELECT f.parent = p_parent AND f.at = p_at INTO linked
        FROM tether_forks f WHERE f.session_id = p_session;
    SELECT array_agg(e.id ORDER BY e.seq) INTO stored FROM tether_events e
        WHERE e.session_id = p_session AND e.seq > p_at AND e.seq <= p_at + n;
    IF linked AND stored = p_ids THEN
        RETURN QUERY SELECT 'retry'::text, NULL::bigint;
    ELSE
        RETURN QUERY SELECT 'conflict'::text,
            (SELECT s.last_seq FROM tether_sessions s WHERE s.session_id = p_session);
    END IF;
END $$;
"""

# The session's own snapshot, else the one it was forked with (kept aside, perhaps).
GET_SNAPSHOT = """
SELECT seq, version, data FROM (
    SELECT 0 AS o, k.seq, k.version, k.data FROM tether_snapshots k WHERE k.session_id = %s
    UNION ALL
    SELECT 1, k.seq, k.version, k.data FROM tether_forks f JOIN tether_snapshots k
        ON k.session_id = f.snap_session AND k.seq = f.snap_seq WHERE f.session_id = %s
    UNION ALL
    SELECT 2, k.seq, k.version, k.data FROM tether_forks f JOIN tether_fork_snapshots k
        ON k.session_id = f.snap_session AND k.seq = f.snap_seq WHERE f.session_id = %s
) found ORDER BY o LIMIT 1
"""

_NO_END = 1 << 62  # past any seq: a stretch with no end
_SELECT = (
    "SELECT %s::text, seq, id, time, thread, type, data FROM tether_events "
    "WHERE session_id = %s AND seq > %s AND seq <= %s ORDER BY seq LIMIT %s"  # NULL: no limit
)
_CHAIN = CHAIN_QUERY.format(forks="tether_forks", p="%s")


class Lineage:
    """The forks' chains one store has read (they never change), and the reads that follow
    them: a session that is not a fork (or a fork read past its fork point, once its chain
    is known) in one query, a fork's prefix in one more per ancestor it reaches into."""

    def __init__(self) -> None:
        self.chains = Chains()

    async def chain(self, conn: Conn, session_id: str) -> Chain:
        kept = self.chains.get(session_id)
        if kept is not None:
            return kept
        cur = await conn.execute(_CHAIN, (session_id,))
        found = chain_of(session_id, await cur.fetchall())
        self.chains.keep(session_id, found)
        return found

    async def rows(
        self, conn: Conn, session_id: str, after_seq: int, limit: int | None
    ) -> list[TupleRow]:
        """The log of `session_id` after `after_seq`, at most `limit` rows, as stored rows
        named with `session_id`."""
        chain = self.chains.get(session_id)
        if chain is None:
            own = await _select(conn, session_id, session_id, after_seq, None, limit)
            if not needs_chain(own, after_seq):
                return own
            chain = await self.chain(conn, session_id)
            if not chain:
                return own  # a gap no link explains: the log as stored
        out: list[TupleRow] = []
        for stretch, start in plan(session_id, chain, after_seq, limit):
            left = None if limit is None else limit - len(out)
            if left == 0:
                break
            out += await _select(conn, session_id, stretch.source, start, stretch.hi, left)
        return out


async def _select(
    conn: Conn, name: str, source: str, after_seq: int, upto: int | None, limit: int | None
) -> list[TupleRow]:
    """`source`'s own rows in (`after_seq`, `upto`], named `name`."""
    upto = _NO_END if upto is None else upto
    cur = await conn.execute(_SELECT, (name, source, after_seq, upto, limit))
    return await cur.fetchall()
