"""The SQLite store's session catalog: its tables, the row an append writes in its group
commit, the indexed queries that answer `CatalogQuery`.

`catalog` holds one row per session; each metadata pair is also a row of
`catalog_metadata`, so a K=V filter is an index lookup; `catalog_text` is an FTS5 table
(trigram tokenizer, case-sensitive over the already lower-cased `CatalogRow.haystack`) that
finds a `q` of 3 or more characters. A `q` of 1 or 2 characters has no trigram to look up:
it is checked with `instr` against each row the other filters let through (the tenant's
rows, found by index), which is exact and as fast as that tenant is small. Every answer
equals `tether.store.catalog`'s reference answer (the conformance suite holds it to that).
A file from before the catalog gets its rows from sqlite_backfill.py.

An append's write is one statement when nothing but the step's figures changed (the common
case: the row's task, metadata and creation time as stored): an UPDATE that sets only the
columns a step moves, so the indexes on the rest are not touched. Otherwise the whole row,
its metadata rows and its text are written again.

Text that has no UTF-8 form (a lone surrogate, as `json.loads` makes from "\\ud800") is
kept as the bytes of its surrogate-passing encoding, in a BLOB, and read back as the same
string; the text index keeps such a string with the surrogate replaced.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from tether.store import catalog
from tether.store.catalog import Admit, CatalogQuery, CatalogRow, ExperimentEntry, Sort, UsageEntry

SCHEMA = """
CREATE TABLE IF NOT EXISTS catalog (
    n INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    parent TEXT NOT NULL,
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    state TEXT NOT NULL,
    stop_reason TEXT,
    model TEXT NOT NULL,
    steps INTEGER NOT NULL,
    turns INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cost_usd REAL,
    task TEXT NOT NULL,
    last_output TEXT NOT NULL,
    metadata TEXT NOT NULL,
    experiment TEXT NOT NULL,
    variant TEXT NOT NULL,
    experiment_task TEXT NOT NULL,
    repeat INTEGER NOT NULL,
    threads_running INTEGER NOT NULL,
    last_seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS catalog_updated ON catalog (tenant, updated, session_id);
CREATE INDEX IF NOT EXISTS catalog_created ON catalog (tenant, created, session_id);
CREATE INDEX IF NOT EXISTS catalog_tokens
    ON catalog (tenant, input_tokens + output_tokens, session_id);
CREATE INDEX IF NOT EXISTS catalog_cost
    ON catalog (tenant, coalesce(cost_usd, -1.0), session_id);
CREATE INDEX IF NOT EXISTS catalog_state ON catalog (tenant, state);
CREATE INDEX IF NOT EXISTS catalog_all_updated ON catalog (updated, session_id);
CREATE INDEX IF NOT EXISTS catalog_all_created ON catalog (created, session_id);
CREATE INDEX IF NOT EXISTS catalog_experiment
    ON catalog (tenant, experiment) WHERE experiment <> '';
CREATE INDEX IF NOT EXISTS catalog_parent
    ON catalog (parent, tenant, updated, session_id) WHERE parent <> '';
CREATE TABLE IF NOT EXISTS catalog_metadata (
    session_id TEXT NOT NULL,
    key TEXT NOT NULL,
    tenant TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (session_id, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS catalog_metadata_value ON catalog_metadata (tenant, key, value);
CREATE INDEX IF NOT EXISTS catalog_metadata_any ON catalog_metadata (key, value);
CREATE VIRTUAL TABLE IF NOT EXISTS catalog_text
    USING fts5(haystack, tokenize = 'trigram case_sensitive 1');
CREATE TABLE IF NOT EXISTS snapshots (
    session_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    version TEXT NOT NULL,
    data BLOB NOT NULL
);
"""

_COLUMNS = (
    "session_id, tenant, parent, created, updated, state, stop_reason, model, steps, turns, "
    "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, task, "
    "last_output, metadata, experiment, variant, experiment_task, repeat, threads_running, "
    "last_seq"
)
_NAMES = [c.strip() for c in _COLUMNS.split(",")]
_UPSERT = (
    f"INSERT INTO catalog ({_COLUMNS}) VALUES ({', '.join('?' * len(_NAMES))}) "
    "ON CONFLICT (session_id) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in _NAMES[1:])
)
# What a step changes. The row's identity, task and metadata (and so its tenant and
# experiment tags) must stand as they were, which the step's WHERE checks.
_STEP_COLUMNS = (
    "updated",
    "state",
    "stop_reason",
    "model",
    "steps",
    "turns",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost_usd",
    "last_output",
    "threads_running",
    "last_seq",
)
_AT = {name: i for i, name in enumerate(_NAMES)}
_IDENTITY = ("session_id", "created", "parent", "task", "metadata")
# The step's columns that indexes are built on, as last written: (updated, state, input
# tokens, output tokens, cost). One left out of the SET where it did not change spares its
# index the delete and insert SQLite makes for every indexed column an UPDATE sets.
Indexed = tuple[str, str, int, int, float | None]
_RESTING = ", ".join(f"'{s}'" for s in sorted(catalog.RESTING))
# The sorted value of each sort, as an expression the indexes above are built on.
_SORTED: dict[Sort, str] = {
    "updated": "c.updated",
    "newest": "c.created",
    "oldest": "c.created",
    "tokens": "(c.input_tokens + c.output_tokens)",
    "cost": "coalesce(c.cost_usd, -1.0)",
}


def fit(text: str) -> str | bytes:
    """Text as SQLite can keep it: as it is, or (holding a lone surrogate) as bytes."""
    if text.isascii():  # most text, and far cheaper to ask than to encode
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")
    return text


def _unfit(value: str | bytes) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value


def _searchable(text: str) -> str:
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _metadata_text(row: CatalogRow) -> str:
    # Pairs in order, not an object: read back, the row is the row that was written.
    return json.dumps(row.metadata, ensure_ascii=True, separators=(",", ":"))


def _values(row: CatalogRow) -> list[Any]:
    return [
        fit(row.session_id),
        fit(row.tenant),
        fit(row.parent),
        row.created,
        row.updated,
        row.state,
        None if row.stop_reason is None else fit(row.stop_reason),
        fit(row.model),
        row.steps,
        row.turns,
        row.input_tokens,
        row.output_tokens,
        row.cache_read_tokens,
        row.cache_write_tokens,
        row.cost_usd,
        fit(row.task),
        fit(row.last_output),
        _metadata_text(row),
        fit(row.experiment),
        fit(row.variant),
        fit(row.experiment_task),
        row.repeat,
        row.threads_running,
        row.last_seq,
    ]


def indexed(row: CatalogRow) -> Indexed:
    return (row.updated, row.state, row.input_tokens, row.output_tokens, row.cost_usd)


@functools.lru_cache(maxsize=64)
def _step(columns: tuple[str, ...]) -> str:
    return (
        f"UPDATE catalog SET {', '.join(f'{c} = ?' for c in columns)} "
        f"WHERE {' AND '.join(f'{c} = ?' for c in _IDENTITY)}"
    )


def write(conn: sqlite3.Connection, row: CatalogRow, before: Indexed | None = None) -> None:
    """Keep `row` as its session's, inside the caller's transaction. `before`: what this
    connection last wrote of the session's indexed columns, if it knows (the columns it
    shows unchanged are not set again)."""
    v = _values(row)
    columns: tuple[str, ...] = _STEP_COLUMNS
    if before is not None:
        same = {
            "updated": before[0] == row.updated,
            "state": before[1] == row.state,
            "input_tokens": before[2:4] == (row.input_tokens, row.output_tokens),
            "output_tokens": before[2:4] == (row.input_tokens, row.output_tokens),
            "cost_usd": before[4] == row.cost_usd,
        }
        columns = tuple(c for c in _STEP_COLUMNS if not same.get(c, False))
    params = [v[_AT[c]] for c in columns] + [v[_AT[c]] for c in _IDENTITY]
    if conn.execute(_step(columns), params).rowcount == 1:
        return
    rewrite(conn, row, v)


def rewrite(conn: sqlite3.Connection, row: CatalogRow, values: list[Any] | None = None) -> None:
    """The whole row, its metadata rows and its text, written again."""
    v = _values(row) if values is None else values
    conn.execute(_UPSERT, v)
    n = conn.execute("SELECT n FROM catalog WHERE session_id = ?", (v[0],)).fetchone()[0]
    conn.execute("DELETE FROM catalog_metadata WHERE session_id = ?", (v[0],))
    conn.executemany(
        "INSERT OR REPLACE INTO catalog_metadata VALUES (?, ?, ?, ?)",
        [(v[0], fit(k), v[1], fit(value)) for k, value in row.metadata],
    )
    conn.execute("DELETE FROM catalog_text WHERE rowid = ?", (n,))
    conn.execute(
        "INSERT INTO catalog_text (rowid, haystack) VALUES (?, ?)",
        (n, _searchable(row.haystack)),
    )


def running(conn: sqlite3.Connection, admit: Admit, session_id: str) -> int:
    """The tenant's running sessions other than `session_id` (under the caller's lock)."""
    found = conn.execute(
        f"SELECT count(*) FROM catalog WHERE tenant = ? AND state NOT IN ({_RESTING}) "
        "AND session_id <> ?",
        (fit(admit.tenant), fit(session_id)),
    ).fetchone()
    return int(found[0])


def _row(r: Sequence[Any]) -> CatalogRow:
    return CatalogRow(
        session_id=_unfit(r[0]),
        tenant=_unfit(r[1]),
        parent=_unfit(r[2]),
        created=r[3],
        updated=r[4],
        state=r[5],
        stop_reason=None if r[6] is None else _unfit(r[6]),
        model=_unfit(r[7]),
        steps=r[8],
        turns=r[9],
        input_tokens=r[10],
        output_tokens=r[11],
        cache_read_tokens=r[12],
        cache_write_tokens=r[13],
        cost_usd=r[14],
        task=_unfit(r[15]),
        last_output=_unfit(r[16]),
        metadata=tuple((k, v) for k, v in json.loads(r[17])),
        experiment=_unfit(r[18]),
        variant=_unfit(r[19]),
        experiment_task=_unfit(r[20]),
        repeat=r[21],
        threads_running=r[22],
        last_seq=r[23],
    )


_SELECT = "SELECT " + ", ".join(f"c.{c}" for c in _NAMES) + " FROM catalog c"


def row_of(conn: sqlite3.Connection, session_id: str) -> CatalogRow | None:
    found = conn.execute(f"{_SELECT} WHERE c.session_id = ?", (fit(session_id),)).fetchone()
    return None if found is None else _row(found)


def _filters(query: CatalogQuery, *, states: bool = True) -> tuple[list[str], list[Any]]:
    """The WHERE terms of every filter of `query` (its states only with `states`)."""
    where: list[str] = []
    args: list[Any] = []

    def among(expression: str, values: frozenset[str]) -> None:
        where.append(f"{expression} IN ({', '.join('?' * len(values))})")
        args.extend(fit(v) for v in sorted(values))

    if query.tenant is not None:
        where.append("c.tenant = ?")
        args.append(fit(query.tenant))
    if states and query.states:
        among("c.state", query.states)
    if query.stop_reasons:
        among("coalesce(c.stop_reason, '')", query.stop_reasons)
    if query.models:
        among("c.model", query.models)
    if query.id_prefix:
        # A range the id index serves, then the exact prefix (no LIKE: ids hold % and _).
        where.append("c.session_id >= ? AND substr(c.session_id, 1, ?) = ?")
        args.extend((fit(query.id_prefix), len(query.id_prefix), fit(query.id_prefix)))
    if query.created_after is not None:
        where.append("c.created >= ?")
        args.append(query.created_after)
    if query.created_before is not None:
        where.append("c.created < ?")
        args.append(query.created_before)
    for key, value in query.metadata:
        # By row number, which every index entry of `catalog` holds: a sort's index is
        # walked without reading the table to test each entry.
        if query.tenant is None:
            where.append(
                "c.n IN (SELECT k.n FROM catalog_metadata m JOIN catalog k "
                "ON k.session_id = m.session_id WHERE m.key = ? AND m.value = ?)"
            )
            args.extend((fit(key), fit(value)))
        else:
            where.append(
                "c.n IN (SELECT k.n FROM catalog_metadata m JOIN catalog k "
                "ON k.session_id = m.session_id WHERE m.tenant = ? AND m.key = ? AND m.value = ?)"
            )
            args.extend((fit(query.tenant), fit(key), fit(value)))
    if query.experiment is not None:
        where.append("c.experiment = ?")
        args.append(fit(query.experiment))
    if query.parent is not None:
        where.append("c.parent = ?")
        args.append(fit(query.parent))
    if query.text:
        text = _searchable(query.text)
        if len(text) >= 3:
            where.append("c.n IN (SELECT rowid FROM catalog_text WHERE catalog_text MATCH ?)")
            args.append('"' + text.replace('"', '""') + '"')
        else:  # no trigram to look up: checked row by row (see the module's docstring)
            where.append("instr((SELECT haystack FROM catalog_text WHERE rowid = c.n), ?) > 0")
            args.append(text)
    return where, args


# A page is read by walking its sort's index and testing each row against the filters: fast
# when many rows pass, but a filter that lets few through, matched only by old rows, walks
# the tenant's whole index (120 ms at a million sessions). Such a filter is read from its own
# index instead and its rows sorted: an experiment's runs, and a metadata pair whose matches
# a capped count finds fewer than this many (sorting them costs ~25 µs each: 2,000 matches
# took 48 ms at 100k sessions, where walking the index found a page in 5 ms).
_DRIVEN_BELOW = 500
_COLUMNS_OF_C = ", ".join(f"c.{c}" for c in _NAMES)


def _source(conn: sqlite3.Connection, query: CatalogQuery) -> tuple[str, list[Any]]:
    """The FROM clause of a page and its arguments (see `_DRIVEN_BELOW`)."""
    if query.parent:  # a session's forks, by their index (over forks' rows only)
        return "FROM catalog c INDEXED BY catalog_parent", []
    if query.experiment and query.tenant is not None:
        return "FROM catalog c INDEXED BY catalog_experiment", []
    if query.metadata:
        key, value = query.metadata[0]
        if query.tenant is None:
            match, found = "key = ? AND value = ?", [fit(key), fit(value)]
        else:
            match, found = "tenant = ? AND key = ? AND value = ?", [fit(query.tenant)]
            found += [fit(key), fit(value)]
        probe = f"SELECT count(*) FROM (SELECT 1 FROM catalog_metadata WHERE {match} LIMIT ?)"
        if conn.execute(probe, (*found, _DRIVEN_BELOW)).fetchone()[0] < _DRIVEN_BELOW:
            driver = f"(SELECT session_id FROM catalog_metadata WHERE {match}) d"
            return f"FROM {driver} CROSS JOIN catalog c ON c.session_id = d.session_id", found
    return "FROM catalog c", []


def page(conn: sqlite3.Connection, query: CatalogQuery) -> list[CatalogRow]:
    where, args = _filters(query)
    source, source_args = _source(conn, query)
    if query.parent:
        where.append("c.parent <> ''")  # what lets the partial index serve the page
    elif query.experiment and query.tenant is not None:
        where.append("c.experiment <> ''")  # what lets the partial index serve the page
    sorted_by = _SORTED[query.sort]
    if query.after is not None:
        # (value, id) after the cursor's, spelt so that the sort's index serves it as a
        # range (a row-value comparison is not one on an expression index).
        value, session_id = query.after
        past, edge = (">", ">=") if catalog.ascending(query.sort) else ("<", "<=")
        where.append(f"{sorted_by} {edge} ? AND ({sorted_by} {past} ? OR c.session_id {past} ?)")
        args.extend((value, value, fit(session_id)))
    order = "ASC" if catalog.ascending(query.sort) else "DESC"
    sql = (
        f"SELECT {_COLUMNS_OF_C} {source} {'WHERE ' + ' AND '.join(where) if where else ''} "
        f"ORDER BY {sorted_by} {order}, c.session_id {order} LIMIT ?"
    )
    params = (*source_args, *args, max(query.limit, 0))
    return [_row(r) for r in conn.execute(sql, params).fetchall()]


def counts(conn: sqlite3.Connection, query: CatalogQuery) -> dict[str, int]:
    where, args = _filters(query, states=False)
    sql = (
        f"SELECT c.state, count(*) FROM catalog c "
        f"{'WHERE ' + ' AND '.join(where) if where else ''} GROUP BY c.state"
    )
    return {str(state): int(n) for state, n in conn.execute(sql, args)}


def experiments(conn: sqlite3.Connection, tenant: str | None, limit: int) -> list[ExperimentEntry]:
    where = "experiment <> ''" + ("" if tenant is None else " AND tenant = ?")
    args: list[Any] = [] if tenant is None else [fit(tenant)]
    found = conn.execute(
        f"SELECT experiment, count(*), min(created), max(updated) FROM catalog WHERE {where} "
        "GROUP BY experiment ORDER BY max(updated) DESC, experiment DESC LIMIT ?",
        (*args, max(limit, 0)),
    ).fetchall()
    return [ExperimentEntry(_unfit(e), int(n), c, u) for e, n, c, u in found]


def usage(
    conn: sqlite3.Connection, tenant: str | None, since: str, until: str, limit: int
) -> list[UsageEntry]:
    """`catalog.usage_of` as one aggregate over the window of the `updated` index (the
    tenant's, or every tenant's)."""
    where = "updated >= ? AND updated < ?" + ("" if tenant is None else " AND tenant = ?")
    args: list[Any] = [since, until, *([] if tenant is None else [fit(tenant)])]
    found = conn.execute(
        f"SELECT substr(updated, 1, {catalog.DAY}), model, count(*), sum(input_tokens), "
        "sum(output_tokens), sum(cache_read_tokens), sum(cache_write_tokens), total(cost_usd), "
        f"sum(cost_usd IS NULL) FROM catalog WHERE {where} GROUP BY 1, 2 ORDER BY 1, 2 LIMIT ?",
        (*args, max(limit, 0)),
    ).fetchall()
    return [catalog.usage_entry(day, _unfit(model), sums) for day, model, *sums in found]


def newest(conn: sqlite3.Connection, limit: int) -> list[tuple[str, int, str, str]]:
    """Every tenant's sessions, the most recently updated first (`Store.sessions`)."""
    found = conn.execute(
        "SELECT session_id, last_seq, created, updated FROM catalog "
        "ORDER BY updated DESC, session_id DESC LIMIT ?",
        (limit,),
    ).fetchall()
    return [(_unfit(s), int(q), c, u) for s, q, c, u in found]
