"""The session catalog in PostgreSQL: a row as `tether_catalog_write` takes it, a row as a
query gives it back, and each `CatalogQuery` as one indexed SQL query (`pg_schema`, version
4, has the tables and indexes). It runs nothing itself; `postgres` and `pg_backfill` do.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any

from tether.errors import UsageError
from tether.store import catalog
from tether.store.catalog import CatalogQuery, CatalogRow

FIELDS = tuple(f.name for f in dataclasses.fields(CatalogRow))
COLUMNS = ", ".join(f"c.{name}" for name in FIELDS)

# The sorted value of each sort, as the catalog's indexes hold it (`catalog.sort_key`).
_SORT_VALUE = {
    "updated": "c.updated",
    "newest": "c.created",
    "oldest": "c.created",
    "tokens": "(c.input_tokens + c.output_tokens)",
    "cost": "coalesce(c.cost_usd, -1)",
}


def row_param(row: CatalogRow) -> str:
    """The row as `tether_catalog_write` takes it: its fields by name and its `haystack`, as
    JSON. PostgreSQL's text holds no NUL and no unpaired surrogate: a row with either is
    stored with U+FFFD in their place (a list shows it; the log keeps the original)."""
    try:
        return _encode(row)
    except (UnicodeEncodeError, ValueError):
        return _encode(_storable(row))


def _encode(row: CatalogRow) -> str:
    doc: dict[str, Any] = {name: getattr(row, name) for name in FIELDS}
    doc["haystack"] = row.haystack
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if "\\u0000" in text:
        raise ValueError("a NUL character")
    if not text.isascii():
        text.encode("utf-8")  # UnicodeEncodeError for a lone surrogate
    return text


def _storable(row: CatalogRow) -> CatalogRow:
    changes: dict[str, Any] = {}
    for name in FIELDS:
        value = getattr(row, name)
        if isinstance(value, str):
            changes[name] = _clean(value)
    changes["metadata"] = tuple((_clean(k), _clean(v)) for k, v in row.metadata)
    cost = row.cost_usd
    changes["cost_usd"] = cost if cost is None or math.isfinite(cost) else None
    return dataclasses.replace(row, **changes)


def _clean(text: str) -> str:
    if "\x00" not in text and not any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        return text
    return "".join("\ufffd" if ch == "\x00" or 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)


def row_from(values: Sequence[Any]) -> CatalogRow:
    """A row as `SELECT {COLUMNS}` gives it back."""
    fields = dict(zip(FIELDS, values, strict=True))
    fields["metadata"] = tuple((str(k), str(v)) for k, v in fields["metadata"])
    return CatalogRow(**fields)


def _like(text: str) -> str:
    """`text` as a LIKE pattern that matches only itself (backslash is LIKE's escape)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def where(query: CatalogQuery, *, states: bool = True) -> tuple[str, list[object]]:
    """The filters of `query` (its states only with `states`) as a WHERE clause over
    `tether_catalog c`, and its parameters: `catalog.matches` in SQL."""
    clauses: list[str] = []
    params: list[object] = []
    if query.tenant is not None:
        clauses.append("c.tenant = %s")
        params.append(query.tenant)
    if states and query.states:
        clauses.append("c.state = ANY(%s)")
        params.append(sorted(query.states))
    if query.stop_reasons:
        clauses.append("coalesce(c.stop_reason, '') = ANY(%s)")
        params.append(sorted(query.stop_reasons))
    if query.models:
        clauses.append("c.model = ANY(%s)")
        params.append(sorted(query.models))
    if query.id_prefix:
        clauses.append("c.session_id LIKE %s")
        params.append(_like(query.id_prefix) + "%")
    if query.text:
        clauses.append(
            "EXISTS (SELECT 1 FROM tether_catalog_text t "
            "WHERE t.session_id = c.session_id AND t.haystack LIKE %s)"
        )
        params.append("%" + _like(query.text) + "%")
    if query.created_after is not None:
        clauses.append("c.created >= %s")
        params.append(query.created_after)
    if query.created_before is not None:
        clauses.append("c.created < %s")
        params.append(query.created_before)
    for key, value in query.metadata:
        clauses.append(
            "EXISTS (SELECT 1 FROM tether_catalog_metadata m WHERE m.hash = "
            "tether_meta_hash(%s, %s) AND m.tenant = c.tenant AND m.session_id = c.session_id)"
        )
        params.extend((key, value))
    if query.experiment is not None:
        if query.experiment:  # through the experiment index (over tagged rows only)
            clauses.append("c.experiment <> '' AND left(c.experiment, 200) = left(%s, 200)")
            params.append(query.experiment)
        clauses.append("c.experiment = %s")
        params.append(query.experiment)
    if query.parent is not None:
        if query.parent:  # through the parent index (over forks' rows only)
            clauses.append("c.parent <> ''")
        clauses.append("c.parent = %s")
        params.append(query.parent)
    return (" AND ".join(clauses) or "true"), params


def page(query: CatalogQuery) -> tuple[str, list[object]]:
    """`catalog.page_of` as one keyset query. A page of every tenant's sessions orders under
    the "POSIX" collation (the order of "C"), as the indexes kept for it do (`pg_schema`)."""
    if query.limit < 0:
        raise UsageError(f"a catalog page needs a limit of 0 or more, not {query.limit}")
    filters, params = where(query)
    value, session_id = _SORT_VALUE[query.sort], "c.session_id"
    if query.tenant is None:
        session_id += ' COLLATE "POSIX"'
        if query.sort in ("updated", "newest", "oldest"):
            value += ' COLLATE "POSIX"'
    direction = "ASC" if catalog.ascending(query.sort) else "DESC"
    if query.after is not None:
        below = ">" if direction == "ASC" else "<"
        filters += f" AND ({value}, {session_id}) {below} (%s, %s)"
        params.extend((_cursor_value(query), query.after[1]))
    sql = (
        f"SELECT {COLUMNS} FROM tether_catalog c WHERE {filters} "
        f"ORDER BY {value} {direction}, {session_id} {direction} LIMIT %s"
    )
    return sql, [*params, query.limit]


def _cursor_value(query: CatalogQuery) -> str | int | float:
    assert query.after is not None
    value = query.after[0]
    if query.sort in ("updated", "newest", "oldest"):
        if not isinstance(value, str):
            raise UsageError(f"a cursor of sort {query.sort} holds a time, not {value!r}")
        return value
    if isinstance(value, str) or not math.isfinite(value):
        raise UsageError(f"a cursor of sort {query.sort} holds a number, not {value!r}")
    if query.sort == "cost":
        return float(value)
    # Tokens are whole numbers, compared as one so that the index on them serves the walk.
    if value != int(value):
        raise UsageError(f"a cursor of sort tokens holds a whole number, not {value!r}")
    return int(value)


def counts(query: CatalogQuery) -> tuple[str, list[object]]:
    """`catalog.counts_of` as one query: sessions per state, from the kept counters when no
    filter but the tenant (and the states, which counts ignore) is asked for."""
    bare = CatalogQuery(tenant=query.tenant, states=query.states)
    if dataclasses.replace(query, sort=bare.sort, after=None, limit=bare.limit) == bare:
        tenant_clause = "WHERE k.tenant = %s " if query.tenant is not None else ""
        sql = (
            f"SELECT k.state, sum(k.n) FROM tether_catalog_counts k {tenant_clause}"
            "GROUP BY k.state HAVING sum(k.n) > 0"
        )
        return sql, [query.tenant] if query.tenant is not None else []
    filters, params = where(query, states=False)
    return (
        f"SELECT c.state, count(*) FROM tether_catalog c WHERE {filters} GROUP BY c.state",
        params,
    )


def experiments(tenant: str | None, limit: int) -> tuple[str, list[object]]:
    """`catalog.experiments_of` as one query."""
    params: list[object] = []
    tenant_clause = ""
    if tenant is not None:
        tenant_clause = "AND c.tenant = %s "
        params.append(tenant)
    sql = (
        "SELECT c.experiment, count(*), min(c.created), max(c.updated) FROM tether_catalog c "
        f"WHERE c.experiment <> '' {tenant_clause}GROUP BY c.experiment "
        "ORDER BY max(c.updated) DESC, c.experiment DESC LIMIT %s"
    )
    return sql, [*params, limit]


def usage(tenant: str | None, since: str, until: str, limit: int) -> tuple[str, list[object]]:
    """`catalog.usage_of` as one aggregate over the window of the `updated` index."""
    params: list[object] = [since, until]
    tenant_clause = ""
    if tenant is not None:
        tenant_clause = "AND c.tenant = %s "
        params.append(tenant)
    sql = (
        f'SELECT left(c.updated, {catalog.DAY}) AS day, c.model COLLATE "C" AS model, '
        "count(*), sum(c.input_tokens), sum(c.output_tokens), sum(c.cache_read_tokens), "
        "sum(c.cache_write_tokens), coalesce(sum(c.cost_usd), 0), "
        "count(*) FILTER (WHERE c.cost_usd IS NULL) FROM tether_catalog c "
        f"WHERE c.updated >= %s AND c.updated < %s {tenant_clause}"
        "GROUP BY 1, 2 ORDER BY 1, 2 LIMIT %s"
    )
    return sql, [*params, max(limit, 0)]
