"""The PostgreSQL store's schema, as numbered migrations tether applies itself.

Owns the tables, the server-side functions that make an append, a claim, a deferral and a
token-bucket take one atomic statement each, and `migrate()`: idempotent, and safe when many workers
start at once (one advisory lock). It does not run queries for the store; `postgres` does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from tether.errors import ConfigError
from tether.store import pg_backfill, pg_forks

log = logging.getLogger("tether.store.postgres")


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

# The session catalog (`store/catalog.py`): one row per session, written by `tether_append`
# in the transaction of the batch it describes. Text that is sorted or compared is COLLATE
# "C", so PostgreSQL orders it as Python does (by code point) whatever the database's locale.
# Every page is a keyset walk of one index: (tenant, sort value, id) for a tenant's sessions,
# (sort value, id) for every tenant's (under "POSIX": see there). The metadata filter looks pairs up by a hash (a value
# may be longer than a btree entry holds); the search text (`CatalogRow.haystack`) lives in a
# table of its own, rewritten only when it changes, so an append does not re-index a task
# it did not touch. `tether_catalog_backfill` is the resumable progress of folding the rows
# of the sessions stored before this version (`pg_backfill`).
_V4 = """
CREATE TABLE tether_catalog (
    session_id text COLLATE "C" PRIMARY KEY,
    tenant text COLLATE "C" NOT NULL,
    parent text NOT NULL,
    created text COLLATE "C" NOT NULL,
    updated text COLLATE "C" NOT NULL,
    state text NOT NULL,
    stop_reason text,
    model text NOT NULL,
    steps bigint NOT NULL,
    turns bigint NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cache_read_tokens bigint NOT NULL,
    cache_write_tokens bigint NOT NULL,
    cost_usd double precision,
    task text NOT NULL,
    last_output text NOT NULL,
    metadata jsonb NOT NULL,  -- [[key, value], ...], in the row's order
    experiment text COLLATE "C" NOT NULL,
    variant text NOT NULL,
    experiment_task text NOT NULL,
    repeat integer NOT NULL,
    threads_running integer NOT NULL,
    last_seq bigint NOT NULL
);
CREATE INDEX tether_catalog_t_updated ON tether_catalog (tenant, updated, session_id);
CREATE INDEX tether_catalog_t_created ON tether_catalog (tenant, created, session_id);
CREATE INDEX tether_catalog_t_tokens
    ON tether_catalog (tenant, (input_tokens + output_tokens), session_id);
CREATE INDEX tether_catalog_t_cost ON tether_catalog (tenant, coalesce(cost_usd, -1), session_id);
-- Every tenant's pages, under the "POSIX" collation: the same order as "C", but a page of one
-- tenant cannot use these (its query orders under "C"). The planner, which cannot know that
-- an older tenant's rows lie deep in a walk of every tenant's, would otherwise filter its way
-- through the newer tenants' rows.
CREATE INDEX tether_catalog_updated
    ON tether_catalog (updated COLLATE "POSIX", session_id COLLATE "POSIX");
CREATE INDEX tether_catalog_created
    ON tether_catalog (created COLLATE "POSIX", session_id COLLATE "POSIX");
CREATE INDEX tether_catalog_tokens
    ON tether_catalog ((input_tokens + output_tokens), session_id COLLATE "POSIX");
CREATE INDEX tether_catalog_cost
    ON tether_catalog (coalesce(cost_usd, -1), session_id COLLATE "POSIX");
CREATE INDEX tether_catalog_t_state ON tether_catalog (tenant, state);
-- What `max_running` counts: the states outside `catalog.RESTING`.
CREATE INDEX tether_catalog_running ON tether_catalog (tenant)
    WHERE state NOT IN ('idle', 'completed', 'failed', 'canceled');
CREATE INDEX tether_catalog_experiment ON tether_catalog (tenant, left(experiment, 200))
    WHERE experiment <> '';

-- A metadata pair as the filter looks it up: one fixed-size value (a pair may be longer than
-- a btree entry holds), collision-resistant, so a match needs no second look at the pair.
CREATE FUNCTION tether_meta_hash(p_key text, p_value text) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT sha256(convert_to(length(p_key)::text || ':' || p_key || p_value, 'UTF8'))
$$;

CREATE TABLE tether_catalog_metadata (
    session_id text COLLATE "C" NOT NULL,
    tenant text COLLATE "C" NOT NULL,
    hash bytea NOT NULL
);
CREATE INDEX tether_catalog_metadata_session ON tether_catalog_metadata (session_id);
CREATE INDEX tether_catalog_metadata_pair ON tether_catalog_metadata (hash, tenant, session_id);

-- Sessions per tenant and state, kept by every row written: what a count of a tenant's
-- sessions by state reads instead of its rows. Sixteen rows per (tenant, state), a session
-- always counted in the one of its id's hash, so appends of one tenant changing state at
-- once seldom wait for one another's counter.
CREATE TABLE tether_catalog_counts (
    tenant text COLLATE "C" NOT NULL,
    state text NOT NULL,
    shard integer NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (tenant, state, shard)
);

CREATE TABLE tether_catalog_text (
    session_id text COLLATE "C" PRIMARY KEY,
    haystack text NOT NULL  -- lower case: the id, the task, the metadata's values
);

-- pg_trgm is a trusted extension: a database owner may create it. Kept in `public` where
-- possible (a schema dropped with its tables must not take the extension from the others);
-- without it `q` is answered by a scan, and the store says so once.
DO $do$
DECLARE
    home text;
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public;
    EXCEPTION WHEN OTHERS THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS pg_trgm;
        EXCEPTION WHEN OTHERS THEN
            RAISE NOTICE 'pg_trgm cannot be created: %', SQLERRM;
        END;
    END;
    SELECT n.nspname INTO home FROM pg_extension e
        JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
    IF home IS NOT NULL THEN
        EXECUTE format('CREATE INDEX tether_catalog_text_trgm ON tether_catalog_text '
                       'USING gin (haystack %I.gin_trgm_ops)', home);
    END IF;
END $do$;

-- Write a session's row (`p_row`: the row's fields by name, and its `haystack`); its
-- metadata pairs and search text only when they changed.
CREATE FUNCTION tether_catalog_write(p_row jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    r tether_catalog := jsonb_populate_record(NULL::tether_catalog, p_row);
    old_metadata jsonb;
    old_tenant text;
    old_state text;
BEGIN
    SELECT c.metadata, c.tenant, c.state INTO old_metadata, old_tenant, old_state
        FROM tether_catalog c WHERE c.session_id = r.session_id;
    INSERT INTO tether_catalog AS c SELECT r.*
    ON CONFLICT (session_id) DO UPDATE SET
        (tenant, parent, created, updated, state, stop_reason, model, steps, turns,
         input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, task,
         last_output, metadata, experiment, variant, experiment_task, repeat,
         threads_running, last_seq) =
        (EXCLUDED.tenant, EXCLUDED.parent, EXCLUDED.created, EXCLUDED.updated,
         EXCLUDED.state, EXCLUDED.stop_reason, EXCLUDED.model, EXCLUDED.steps,
         EXCLUDED.turns, EXCLUDED.input_tokens, EXCLUDED.output_tokens,
         EXCLUDED.cache_read_tokens, EXCLUDED.cache_write_tokens, EXCLUDED.cost_usd,
         EXCLUDED.task, EXCLUDED.last_output, EXCLUDED.metadata, EXCLUDED.experiment,
         EXCLUDED.variant, EXCLUDED.experiment_task, EXCLUDED.repeat,
         EXCLUDED.threads_running, EXCLUDED.last_seq);
    IF old_metadata IS DISTINCT FROM r.metadata OR old_tenant IS DISTINCT FROM r.tenant THEN
        DELETE FROM tether_catalog_metadata m WHERE m.session_id = r.session_id;
        INSERT INTO tether_catalog_metadata
            SELECT r.session_id, r.tenant, tether_meta_hash(p->>0, p->>1)
            FROM jsonb_array_elements(r.metadata) AS p;
    END IF;
    INSERT INTO tether_catalog_text AS t VALUES (r.session_id, p_row->>'haystack')
        ON CONFLICT (session_id) DO UPDATE SET haystack = EXCLUDED.haystack
        WHERE t.haystack IS DISTINCT FROM EXCLUDED.haystack;
    IF old_state IS DISTINCT FROM r.state OR old_tenant IS DISTINCT FROM r.tenant THEN
        -- Both counter rows in one statement, in (tenant, state) order: two appends moving
        -- sessions of one shard in opposite directions lock them in the same order.
        INSERT INTO tether_catalog_counts AS k
            SELECT d.tenant, d.state, hashtext(r.session_id) & 15, d.n
            FROM (VALUES (old_tenant, old_state, -1), (r.tenant, r.state, 1))
                AS d(tenant, state, n)
            WHERE d.tenant IS NOT NULL ORDER BY d.tenant, d.state
        ON CONFLICT (tenant, state, shard) DO UPDATE SET n = k.n + EXCLUDED.n;
    END IF;
END $$;

-- A rebuilt row, written only while the session's log still ends at the row's last seq:
-- the lock on the log row waits out an append in flight and then sees its new last seq. An
-- exclusive one: every writer of a session's catalog row holds it (an append by its UPDATE),
-- so `tether_catalog_write` reads the state it moves the counters from alone.
CREATE FUNCTION tether_put_catalog_row(p_row jsonb) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM tether_sessions s
        WHERE s.session_id = p_row->>'session_id' AND s.last_seq = (p_row->>'last_seq')::bigint
        FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM tether_catalog_write(p_row);
    RETURN true;
END $$;

-- As in version 1, and the session's catalog row (`p_row`) in the same transaction. With
-- `p_admit_tenant`, the batch makes the session run under that tenant's `max_running`
-- (`p_admit_max`): admissions of one tenant take turns on an advisory lock, count the
-- tenant's running sessions (this one aside) and refuse before anything is written.
-- status: ok | retry | conflict | lease | quota (`actual`: the running count).
DROP FUNCTION tether_append(text, bigint, bigint, text[], text[], text[], text[], text[]);
CREATE FUNCTION tether_append(
    p_session text, p_expected bigint, p_generation bigint,
    p_ids text[], p_times text[], p_threads text[], p_types text[], p_data text[],
    p_row jsonb, p_admit_tenant text, p_admit_max integer
) RETURNS TABLE (status text, actual bigint, held_owner text, held_generation bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    n integer := cardinality(p_ids);
    h_owner text;
    h_generation bigint;
    stored text[];
    running bigint;
BEGIN
    IF p_row IS NULL THEN
        RAISE EXCEPTION 'tether_append needs the session''s catalog row';
    END IF;
    IF p_generation IS NOT NULL THEN
        SELECT l.owner, l.generation INTO h_owner, h_generation
            FROM tether_leases l WHERE l.session_id = p_session FOR SHARE;
        IF h_generation IS DISTINCT FROM p_generation
           OR (h_owner = '' AND h_generation = p_generation) THEN
            RETURN QUERY SELECT 'lease'::text, NULL::bigint, h_owner, h_generation;
            RETURN;
        END IF;
    END IF;
    IF p_admit_tenant IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(2122186754, hashtext(p_admit_tenant));
        -- Only a batch that would be written is refused: a conflict or a retry says so below.
        IF coalesce((SELECT s.last_seq FROM tether_sessions s
                     WHERE s.session_id = p_session), 0) = p_expected THEN
            SELECT count(*) INTO running FROM tether_catalog c
                WHERE c.tenant = p_admit_tenant AND c.session_id <> p_session
                  AND c.state NOT IN ('idle', 'completed', 'failed', 'canceled');
            IF running >= p_admit_max THEN
                RETURN QUERY SELECT 'quota'::text, running, NULL::text, NULL::bigint;
                RETURN;
            END IF;
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
    PERFORM tether_catalog_write(p_row);
    IF p_generation IS NULL THEN
        PERFORM pg_notify('tether_news', p_session);
    END IF;
    RETURN QUERY SELECT 'ok'::text, p_expected + n, NULL::text, NULL::bigint;
END $$;

CREATE TABLE tether_snapshots (
    session_id text PRIMARY KEY,
    seq bigint NOT NULL,
    version text NOT NULL,
    data bytea NOT NULL
);

-- One row: how far the backfill of the sessions stored before this version has come (the
-- last session id it folded, in id order) and whether it is done.
CREATE TABLE tether_catalog_backfill (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    after_id text NOT NULL DEFAULT '',
    done boolean NOT NULL DEFAULT false
);
INSERT INTO tether_catalog_backfill DEFAULT VALUES;
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "sessions, events, leases with claim counts, wakeups, blobs, token buckets", _V1),
    Migration(2, "wakeups get a not-before time and its reason (parked, backoff)", _V2),
    Migration(3, "takeovers go to any worker, oldest expiry first; suspects only alone", _V3),
    Migration(4, "the session catalog (rows, metadata pairs, search text), fold snapshots", _V4),
    Migration(5, "forks: a session's log begins with its parent's (tether_fork)", pg_forks.V5),
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


async def migrate(
    conn: AsyncConnection[TupleRow],
    *,
    upto: int = SCHEMA_VERSION,
    backfill_batch: int = pg_backfill.BATCH,
    progress: pg_backfill.Progress | None = None,
) -> list[Migration]:
    """Bring the schema to `SCHEMA_VERSION` (or `upto`, for tests of older versions), then
    fold the catalog rows of the sessions stored before it had one (`pg_backfill`, resumed
    where a killed run stopped); returns the migrations applied (none when it is current).
    Each migration commits with its bookkeeping row, so a crash leaves a whole number of
    them applied. A database newer than this code is refused, not touched."""
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
            pending = [m for m in MIGRATIONS if current < m.version <= upto]
            if not pending:
                break
            step = pending[0]
            await conn.execute(step.sql.encode())
            await conn.execute(
                "INSERT INTO tether_schema (version, description) VALUES (%s, %s)",
                (step.version, step.description),
            )
            applied.append(step)
    if upto >= 4:
        await pg_backfill.backfill(conn, _MIGRATION_LOCK, batch=backfill_batch, progress=progress)
        await _say_if_search_is_unindexed(conn)
    return applied


_unindexed_said = False


async def _say_if_search_is_unindexed(conn: AsyncConnection[TupleRow]) -> None:
    """Log once per process when `q` has no trigram index (pg_trgm could not be created)."""
    global _unindexed_said
    if _unindexed_said:
        return
    cur = await conn.execute("SELECT to_regclass('tether_catalog_text_trgm') IS NOT NULL")
    row = await cur.fetchone()
    if row is not None and not row[0]:
        _unindexed_said = True
        log.warning(
            "the session catalog's text search (q=) has no index: the pg_trgm extension "
            "could not be created in this database, so each search reads every session's text"
        )
