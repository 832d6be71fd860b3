"""A session list a page at a time, from the store's catalog (`store/catalog.py`): the options
of `Runtime.sessions` (`GET /v1/sessions`'s parameters) read and bounded into a
`CatalogQuery` for one tenant, the page asked for one row longer (that row says whether a
next page exists), its cursor, and the counts per state. No log is read.

The cursor is opaque to callers: base64url JSON of the sort and the last row's key
(`catalog.sort_key`), so a page goes on after that row in the store's keyset order, however
many sessions came in above it meanwhile.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import get_args

from tether.errors import UsageError
from tether.events import format_time
from tether.runtime.base import ListOptions, SessionPage, SessionSummary
from tether.state import State
from tether.store import catalog
from tether.store.base import Catalog
from tether.store.catalog import SORTS, CatalogQuery, Key, Sort

STATES: frozenset[str] = frozenset(get_args(State))
MAX_LIMIT = 500  # rows in a page
MAX_TEXT = 200  # characters of `q`, `id_prefix`, a model, a stop reason, a metadata pair
MAX_ITEMS = 20  # values of one filter; metadata pairs


def encode_cursor(sort: Sort, key: Key) -> str:
    raw = json.dumps([sort, *key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, sort: Sort) -> Key:
    """The key a cursor carries: `UsageError` for anything `encode_cursor` did not write or
    a cursor of another sort."""
    wrong = UsageError(f"cursor {cursor[:40]!r} is not one this server gave")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        given, value, session_id = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        raise wrong from None
    timed = given in ("updated", "newest", "oldest")
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    kind_ok = isinstance(value, str) if timed else numeric
    if given not in SORTS or not kind_ok or not isinstance(session_id, str):
        raise wrong
    if given != sort:
        raise UsageError(f"cursor is for sort={given}, not sort={sort}: start again")
    return (value if timed else float(value)), session_id


def catalog_query(
    tenant: str | None, limit: int, options: ListOptions
) -> tuple[CatalogQuery, bool]:
    """The catalog query `options` ask for, scoped to `tenant` (None: every tenant's), and
    whether counts are wanted. `UsageError` naming the first option that is wrong."""
    unknown = sorted(set(options) - set(ListOptions.__annotations__))
    if unknown:
        raise UsageError(f"unknown list option {unknown[0]!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise UsageError(f"limit must be a whole number 1..{MAX_LIMIT}, not {limit!r}")
    states = _values(options, "state")
    if states - STATES:
        known = ", ".join(sorted(STATES))
        raise UsageError(f"unknown state {sorted(states - STATES)[0][:40]!r} (known: {known})")
    raw_sort = options.get("sort") or "updated"
    if raw_sort not in SORTS:
        raise UsageError(f"sort must be one of {', '.join(SORTS)}, not {str(raw_sort)[:40]!r}")
    sort: Sort = raw_sort  # narrowed by the check just above
    cursor = options.get("cursor")
    query = CatalogQuery(
        tenant=tenant,
        states=states,
        stop_reasons=_values(options, "stop_reason"),
        models=_values(options, "model"),
        id_prefix=_text(options, "id_prefix"),
        text=_text(options, "q").strip().lower(),
        created_after=_time(options, "created_after"),
        created_before=_time(options, "created_before"),
        metadata=_pairs(options.get("metadata") or {}),
        parent=_text(options, "parent") or None,
        sort=sort,
        after=decode_cursor(cursor, sort) if cursor else None,
        limit=limit,
    )
    return query, bool(options.get("counts"))


async def page_of(store: Catalog, query: CatalogQuery, counts: bool = False) -> SessionPage:
    """One page of the catalog: `query.limit` rows, the next page's cursor, the counts."""
    rows = await store.catalog(replace(query, limit=query.limit + 1))
    shown = rows[: query.limit]
    more = len(rows) > query.limit
    cursor = encode_cursor(query.sort, catalog.sort_key(shown[-1], query.sort)) if more else None
    tally = await store.catalog_counts(query) if counts else None
    return SessionPage(tuple(SessionSummary.of(r) for r in shown), cursor, tally)


async def list_sessions(
    store: Catalog, tenant: str | None, limit: int, options: ListOptions
) -> SessionPage:
    """`Runtime.sessions` over a store, for `tenant`'s sessions (every tenant's with None)."""
    query, counts = catalog_query(tenant, limit, options)
    return await page_of(store, query, counts)


def _values(options: ListOptions, name: str) -> frozenset[str]:
    raw: object = options.get(name) or ()
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, Collection) or not all(isinstance(v, str) for v in items):
        raise UsageError(f"{name} takes strings (or one comma-separated string)")
    values = frozenset(v.strip() for v in items if v.strip())
    if len(values) > MAX_ITEMS or any(len(v) > MAX_TEXT for v in values):
        raise UsageError(f"{name} takes at most {MAX_ITEMS} values of {MAX_TEXT} characters")
    return values


def _text(options: ListOptions, name: str) -> str:
    raw: object = options.get(name) or ""
    if not isinstance(raw, str):
        raise UsageError(f"{name} must be a string, not {type(raw).__name__}")
    if len(raw) > MAX_TEXT:
        raise UsageError(f"{name} is longer than {MAX_TEXT} characters")
    return raw


def _time(options: ListOptions, name: str) -> str | None:
    """The time in the catalog's form (`created` compares with it as text)."""
    raw: object = options.get(name)
    if raw is None or raw == "":
        return None
    moment = raw if isinstance(raw, datetime) else None
    if isinstance(raw, str):
        with contextlib.suppress(ValueError):  # said below, with what a time must be
            moment = datetime.fromisoformat(raw.strip())
    if moment is None:
        raise UsageError(
            f"{name} must be an ISO 8601 time (2026-01-02T03:04:05Z), not {str(raw)[:40]!r}"
        )
    if moment.tzinfo is None:  # a time without an offset is read as UTC
        moment = moment.replace(tzinfo=UTC)
    return format_time(moment.timestamp())


def _pairs(given: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    if not isinstance(given, Mapping):
        raise UsageError("metadata must be a mapping of KEY to VALUE")
    if len(given) > MAX_ITEMS:
        raise UsageError(f"at most {MAX_ITEMS} metadata pairs")
    for key, value in given.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key:
            raise UsageError(f"metadata takes KEY=VALUE pairs of text, not {key!r}: {value!r}")
        if len(key) + 1 + len(value) > MAX_TEXT:
            raise UsageError(f"metadata {key[:40]!r}: a pair is at most {MAX_TEXT} characters")
    return tuple(given.items())
