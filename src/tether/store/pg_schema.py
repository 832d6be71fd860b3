"""The PostgreSQL store's schema, as numbered migrations tether applies itself.

Owns the tables, the server-side functions that make an append, a claim, a deferral and a
token-bucket take one atomic statement each, and `migrate()`: idempotent, and safe when many workers
start at once (one advisory lock). It does not run queries for the store; `postgres` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from tether.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    sql: str


# Every append of a control-plane writer (no lease: a user message, a decision, a cancel)
# notifies this channel with the session id, at commit; workers LISTEN to act at once.
NEWS_CHANNEL = "tether_news"

_V1 = """
CREATE TABLE tether_sessions (
    session_id text PRIMARY KEY,
    last_seq bigint NOT NULL,
    last_type text NOT NULL,
    created text NOT NULL,
    updated text NOT NULL
);
CREATE INDEX tether_sessions_updated ON tether_sessions (updated DESC);

CREATE TABLE tether_events (
    session_id text NOT NULL,
    seq bigint NOT NULL,
    id text NOT NULL,
    time text NOT NULL,
    thread text NOT NULL,
    type text NOT NULL,
    data text NOT NULL,  -- canonical JSON, kept byte for byte
    PRIMARY KEY (session_id, seq)
);

-- `expires` is seconds since the epoch by the database's clock, never a worker's.
-- `claims` counts claims since the last clean release: a worker that dies holding the
-- lease leaves it raised, so a session that keeps killing its workers can be parked.
CREATE TABLE tether_leases (
    session_id text PRIMARY KEY,
    owner text NOT NULL,
    generation bigint NOT NULL,
    expires double precision NOT NULL,
    claims integer NOT NULL DEFAULT 0
);

-- Sessions with work for a runner. `token` grows with every mark (a worker clears only the
-- mark it saw); `marked`, the first mark's time, orders the queue.
CREATE TABLE tether_wakeups (
    session_id text PRIMARY KEY,
    token bigint NOT NULL,
    marked double precision NOT NULL
);
CREATE INDEX tether_wakeups_marked ON tether_wakeups (marked);
CREATE SEQUENCE tether_wakeup_tokens;

CREATE TABLE tether_blobs (
    digest text PRIMARY KEY,
    data bytea NOT NULL
);

CREATE TABLE tether_buckets (
    name text PRIMARY KEY,
    capacity double precision NOT NULL,
    rate double precision NOT NULL,
    level double precision NOT NULL,
    updated double precision NOT NULL
);

CREATE FUNCTION tether_now() RETURNS double precision
LANGUAGE sql VOLATILE AS $$ SELECT extract(epoch FROM clock_timestamp())::double precision $$;

-- One batch, atomically: fence by lease generation (FOR SHARE: a claim that would raise
-- the generation waits for this append to commit, or this append sees the new one), move
-- the session's last_seq from p_expected (the row lock orders concurrent writers), insert.
-- status: ok | retry (the same batch is stored already) | conflict | lease.
CREATE FUNCTION tether_append(
    p_session text, p_expected bigint, p_generation bigint,
    p_ids text[], p_times text[], p_threads text[], p_types text[], p_data text[]
) RETURNS TABLE (status text, actual bigint, held_owner text, held_generation bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    n integer := cardinality(p_ids);
    h_owner text;
    h_generation bigint;
    stored text[];
BEGIN
    IF p_generation IS NOT NULL THEN
        SELECT l.owner, l.generation INTO h_owner, h_generation
            FROM tether_leases l WHERE l.session_id = p_session FOR SHARE;
        IF h_generation IS DISTINCT FROM p_generation
           OR (h_owner = '' AND h_generation = p_generation) THEN
            RETURN QUERY SELECT 'lease'::text, NULL::bigint, h_owner, h_generation;
            RETURN;
        END IF;
    END IF;
    IF p_expected = 0 THEN
        INSERT INTO tether_sessions AS s VALUES (p_session, n, p_types[n], p_times[1], p_times[n])
            ON CONFLICT (session_id) DO NOTHING;
    ELSE
        UPDATE tether_sessions s SET last_seq = p_expected + n, last_type = p_types[n],
                updated = p_times[n]
            WHERE s.session_id = p_session AND s.last_seq = p_expected;
    END IF;
    IF NOT FOUND THEN
        SELECT array_agg(e.id ORDER BY e.seq) INTO stored FROM tether_events e
            WHERE e.session_id = p_session AND e.seq > p_expected AND e.seq <= p_expected + n;
        IF stored = p_ids THEN
            RETURN QUERY SELECT 'retry'::text, NULL::bigint, NULL::text, NULL::bigint;
        ELSE
            RETURN QUERY SELECT 'conflict'::text,
                coalesce((SELECT s.last_seq FROM tether_sessions s
                          WHERE s.session_id = p_session), 0), NULL::text, NULL::bigint;
        END IF;
        RETURN;
    END IF;
    INSERT INTO tether_events
        SELECT p_session, p_expected + u.o, u.i, u.t, u.th, u.ty, u.d
        FROM unnest(p_ids, p_times, p_threads, p_types, p_data) WITH ORDINALITY
            AS u(i, t, th, ty, d, o);
    IF p_generation IS NULL THEN
        PERFORM pg_notify('tether_news', p_session);
    END IF;
    RETURN QUERY SELECT 'ok'::text, p_expected + n, NULL::text, NULL::bigint;
END $$;

-- Take the lease if it is free, expired or already this owner's: a new generation, one
-- more claim. Otherwise return the holder. One statement, so two claimers cannot both win.
CREATE FUNCTION tether_claim(p_session text, p_owner text, p_ttl double precision)
RETURNS TABLE (won boolean, owner text, generation bigint, expires double precision,
               claims integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    now_ double precision := tether_now();
BEGIN
    RETURN QUERY
        INSERT INTO tether_leases AS l VALUES (p_session, p_owner, 1, now_ + p_ttl, 1)
        ON CONFLICT (session_id) DO UPDATE
            SET owner = p_owner, generation = l.generation + 1, expires = now_ + p_ttl,
                claims = l.claims + 1
            WHERE l.expires <= tether_now() OR l.owner = p_owner
        RETURNING true, l.owner, l.generation, l.expires, l.claims;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, l.owner, l.generation, l.expires, l.claims
            FROM tether_leases l WHERE l.session_id = p_session;
    END IF;
END $$;

CREATE FUNCTION tether_mark(p_session text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO tether_wakeups VALUES (p_session, nextval('tether_wakeup_tokens'), tether_now())
        ON CONFLICT (session_id) DO UPDATE SET token = nextval('tether_wakeup_tokens');
    SELECT pg_notify('tether_news', p_session);
$$;

-- Claim up to p_limit runnable sessions for one worker in one statement. SKIP LOCKED: two
-- workers asking at once get different sessions, neither waits for the other. A suspect (a
-- session whose last worker died holding it: claims > 0 on an expired lease) is handed out
-- only to a worker running nothing else (p_alone), and then alone: a session that kills
-- its worker takes no other session down with it.
CREATE FUNCTION tether_claim_runnable(
    p_owner text, p_ttl double precision, p_limit integer, p_alone boolean
) RETURNS TABLE (session_id text, token bigint, generation bigint, expires double precision,
                 claims integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    now_ double precision := tether_now();
    w record;
BEGIN
    FOR w IN
        SELECT k.session_id, k.token, coalesce(l.claims, 0) > 0 AS suspect
        FROM tether_wakeups k
        LEFT JOIN tether_leases l ON l.session_id = k.session_id
        WHERE (l.session_id IS NULL OR l.expires <= now_)
          AND (p_alone OR coalesce(l.claims, 0) = 0)
        ORDER BY coalesce(l.claims, 0) > 0 DESC, k.marked
        LIMIT CASE WHEN p_alone THEN 1 ELSE p_limit END
        FOR UPDATE OF k SKIP LOCKED
    LOOP
        RETURN QUERY
            INSERT INTO tether_leases AS l VALUES (w.session_id, p_owner, 1, now_ + p_ttl, 1)
            ON CONFLICT (session_id) DO UPDATE
                SET owner = p_owner, generation = l.generation + 1, expires = now_ + p_ttl,
                    claims = l.claims + 1
                WHERE l.expires <= tether_now()
            RETURNING l.session_id, w.token, l.generation, l.expires, l.claims;
        IF w.suspect THEN
            RETURN;
        END IF;
    END LOOP;
    IF p_alone AND p_limit > 1 THEN
        -- The oldest was no suspect: fill the rest of the worker's room as usual.
        RETURN QUERY SELECT * FROM tether_claim_runnable(p_owner, p_ttl, p_limit - 1, false);
    END IF;
END $$;

-- A shared token bucket: refill by the database's clock, then take p_amount if the level
-- allows (more than the capacity waits for a full bucket). Returns the seconds to wait
-- before asking again: 0 means taken. The row lock makes read-refill-take atomic.
CREATE FUNCTION tether_bucket_take(
    p_name text, p_capacity double precision, p_rate double precision,
    p_amount double precision
) RETURNS double precision
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    now_ double precision := tether_now();
    b tether_buckets%ROWTYPE;
    need double precision := least(p_amount, p_capacity);
BEGIN
    INSERT INTO tether_buckets VALUES (p_name, p_capacity, p_rate, p_capacity, now_)
        ON CONFLICT (name) DO NOTHING;
    SELECT * INTO b FROM tether_buckets WHERE name = p_name FOR UPDATE;
    -- A changed limit takes effect at once; the level never exceeds the new capacity.
    b.level := least(p_capacity, b.level + greatest(0, now_ - b.updated) * p_rate);
    IF b.level >= need - 1e-9 THEN
        UPDATE tether_buckets SET capacity = p_capacity, rate = p_rate,
            level = b.level - p_amount, updated = greatest(b.updated, now_)
            WHERE name = p_name;
        RETURN 0;
    END IF;
    UPDATE tether_buckets SET capacity = p_capacity, rate = p_rate, level = b.level,
        updated = greatest(b.updated, now_) WHERE name = p_name;
    RETURN (need - b.level) / p_rate;
END $$;
"""

# A wakeup's not-before time (by the database's clock) and why: a session parked because its
# model's backend cannot take a call yet, or backing off after a failed run. `runnable` and
# `tether_claim_runnable` skip it until then; a new mark (`tether_mark`) leaves it as it is.
_V2 = """
ALTER TABLE tether_wakeups ADD COLUMN not_before double precision,
    ADD COLUMN reason text;

-- Keep the session's mark back until p_seconds from now, replacing any earlier time; a
-- session with no mark is marked (a deferral says it has work to come back to). The token
-- is not bumped, and nobody is notified: nobody may take the session before then.
CREATE FUNCTION tether_defer(p_session text, p_seconds double precision, p_reason text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    now_ double precision := tether_now();
BEGIN
    INSERT INTO tether_wakeups AS k (session_id, token, marked, not_before, reason)
        VALUES (p_session, nextval('tether_wakeup_tokens'), now_, now_ + p_seconds, p_reason)
        ON CONFLICT (session_id) DO UPDATE
            SET not_before = EXCLUDED.not_before, reason = EXCLUDED.reason;
END $$;

-- As in version 1, and a deferred mark is not handed out before its time.
CREATE OR REPLACE FUNCTION tether_claim_runnable(
    p_owner text, p_ttl double precision, p_limit integer, p_alone boolean
) RETURNS TABLE (session_id text, token bigint, generation bigint, expires double precision,
                 claims integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    now_ double precision := tether_now();
    w record;
BEGIN
    FOR w IN
        SELECT k.session_id, k.token, coalesce(l.claims, 0) > 0 AS suspect
        FROM tether_wakeups k
        LEFT JOIN tether_leases l ON l.session_id = k.session_id
        WHERE (l.session_id IS NULL OR l.expires <= now_)
          AND (k.not_before IS NULL OR k.not_before <= now_)
          AND (p_alone OR coalesce(l.claims, 0) = 0)
        ORDER BY coalesce(l.claims, 0) > 0 DESC, k.marked, k.session_id
        LIMIT CASE WHEN p_alone THEN 1 ELSE p_limit END
        FOR UPDATE OF k SKIP LOCKED
    LOOP
        RETURN QUERY
            INSERT INTO tether_leases AS l VALUES (w.session_id, p_owner, 1, now_ + p_ttl, 1)
            ON CONFLICT (session_id) DO UPDATE
                SET owner = p_owner, generation = l.generation + 1, expires = now_ + p_ttl,
                    claims = l.claims + 1
                WHERE l.expires <= tether_now()
            RETURNING l.session_id, w.token, l.generation, l.expires, l.claims;
        IF w.suspect THEN
            RETURN;
        END IF;
    END LOOP;
    IF p_alone AND p_limit > 1 THEN
        -- The oldest was no suspect: fill the rest of the worker's room as usual.
        RETURN QUERY SELECT * FROM tether_claim_runnable(p_owner, p_ttl, p_limit - 1, false);
    END IF;
END $$;
"""

# Takeover in parallel: a session whose worker died once (one claim counted on a lease that
# ran out) goes to any worker, before fresh work, oldest expiry first; only a suspect (three or
# more counted, `store.base.SUSPECT_CLAIMS`: `runtime.claims` forgives a death the session had
# no part in) goes to a worker running nothing else, and by itself.
_V3 = """
CREATE OR REPLACE FUNCTION tether_claim_runnable(
    p_owner text, p_ttl double precision, p_limit integer, p_alone boolean
) RETURNS TABLE (session_id text, token bigint, generation bigint, expires double precision,
                 claims integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    now_ double precision := tether_now();
    w record;
BEGIN
    FOR w IN
        SELECT k.session_id, k.token, coalesce(l.claims, 0) >= 3 AS suspect
        FROM tether_wakeups k
        LEFT JOIN tether_leases l ON l.session_id = k.session_id
        WHERE (l.session_id IS NULL OR l.expires <= now_)
          AND (k.not_before IS NULL OR k.not_before <= now_)
          AND (p_alone OR coalesce(l.claims, 0) < 3)
        ORDER BY coalesce(l.claims, 0) >= 3 DESC, coalesce(l.claims, 0) > 0 DESC,
                 CASE WHEN coalesce(l.claims, 0) > 0 THEN l.expires END, k.marked, k.session_id
        LIMIT CASE WHEN p_alone THEN 1 ELSE p_limit END
        FOR UPDATE OF k SKIP LOCKED
    LOOP
        RETURN QUERY
            INSERT INTO tether_leases AS l VALUES (w.session_id, p_owner, 1, now_ + p_ttl, 1)
            ON CONFLICT (session_id) DO UPDATE
                SET owner = p_owner, generation = l.generation + 1, expires = now_ + p_ttl,
                    claims = l.claims + 1
                WHERE l.expires <= tether_now()
            RETURNING l.session_id, w.token, l.generation, l.expires, l.claims;
        IF w.suspect THEN
            RETURN;
        END IF;
    END LOOP;
    IF p_alone AND p_limit > 1 THEN
        -- The oldest was no suspect: fill the rest of the worker's room as usual.
        RETURN QUERY SELECT * FROM tether_claim_runnable(p_owner, p_ttl, p_limit - 1, false);
    END IF;
END $$;
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "sessions, events, leases with claim counts, wakeups, blobs, token buckets", _V1),
    Migration(2, "wakeups get a not-before time and its reason (parked, backoff)", _V2),
    Migration(3, "takeovers go to any worker, oldest expiry first; suspects only alone", _V3),
)
SCHEMA_VERSION = MIGRATIONS[-1].version

# Any fixed number: every tether process takes this advisory lock to migrate, so two
# workers starting at once do not both create the tables.
_MIGRATION_LOCK = 0x7E7E_0001

_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS tether_schema (
    version integer PRIMARY KEY,
    description text NOT NULL,
    applied timestamptz NOT NULL DEFAULT now()
)
"""


async def schema_version(conn: AsyncConnection[TupleRow]) -> int:
    """The version the database is at: 0 for one tether never touched."""
    cur = await conn.execute("SELECT to_regclass('tether_schema') IS NOT NULL")
    row = await cur.fetchone()
    if row is None or not row[0]:
        return 0
    cur = await conn.execute("SELECT coalesce(max(version), 0) FROM tether_schema")
    row = await cur.fetchone()
    return int(row[0]) if row is not None else 0


async def migrate(conn: AsyncConnection[TupleRow]) -> list[Migration]:
    """Bring the schema to `SCHEMA_VERSION`; returns the migrations applied (none when it is
    current). Each migration commits with its bookkeeping row, so a crash leaves a whole
    number of them applied. A database newer than this code is refused, not touched."""
    applied: list[Migration] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        await conn.execute(_BOOKKEEPING)
    while True:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            current = await schema_version(conn)
            if current > SCHEMA_VERSION:
                raise ConfigError(
                    f"the database has tether schema version {current}; this tether knows "
                    f"versions up to {SCHEMA_VERSION}: upgrade tether"
                )
            pending = [m for m in MIGRATIONS if m.version > current]
            if not pending:
                return applied
            step = pending[0]
            await conn.execute(step.sql.encode())
            await conn.execute(
                "INSERT INTO tether_schema (version, description) VALUES (%s, %s)",
                (step.version, step.description),
            )
            applied.append(step)
