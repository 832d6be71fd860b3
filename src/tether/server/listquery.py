"""What a `GET /v1/sessions` request asks for, read and bounded: its filters, its sort and its
cursor. Each refusal is an `ApiError` naming the parameter; applying them to rows: `listing`.
The cursor is opaque to clients (base64url JSON of the sort and the last row's key)."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, get_args

from tether.events import format_time
from tether.server.errors import ApiError
from tether.state import State

Sort = Literal["updated", "newest", "oldest", "tokens", "cost"]
SORTS: dict[str, Sort] = {name: name for name in get_args(Sort)}
STATES: frozenset[str] = frozenset(get_args(State))
MAX_TEXT = 200  # characters of `q`, `id_prefix`, a model or a stop reason
MAX_ITEMS = 20  # comma-separated values of one parameter; `metadata` parameters
# A row's place in its sort: (the sorted value, session id). Times are RFC 3339 strings of one
# fixed form, so they compare as text; tokens and cost are numbers (an unknown cost: -1).
Key = tuple[str | float, str]


@dataclass(frozen=True, slots=True)
class Query:
    states: frozenset[str] = frozenset()
    stop_reasons: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()
    id_prefix: str = ""
    text: str = ""  # lower case; matched in the id, the task and the metadata's values
    created_after: str | None = None  # event-time form, so it compares with `created`
    created_before: str | None = None
    metadata: tuple[tuple[str, str], ...] = ()  # (key, value as text): all must hold
    sort: Sort = "updated"


def encode_cursor(sort: str, key: Key) -> str:
    raw = json.dumps([sort, *key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, sort: str) -> Key:
    """The key a cursor carries, or `invalid_request` for anything this module did not write
    or a cursor of another sort."""
    wrong = ApiError("invalid_request", f"cursor {cursor[:40]!r} is not one this server gave")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        given, value, session_id = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        raise wrong from None
    timed = given in ("updated", "newest", "oldest")
    kind_ok = isinstance(value, str) if timed else isinstance(value, int | float)
    if given not in SORTS or not kind_ok or not isinstance(session_id, str):
        raise wrong
    if given != sort:
        raise ApiError(
            "invalid_request", f"cursor is for sort={given}, not sort={sort}: start again"
        )
    return value, session_id


def _listed(params: Mapping[str, str], name: str) -> frozenset[str]:
    raw = params.get(name)
    if not raw:
        return frozenset()
    values = frozenset(v.strip() for v in raw.split(",") if v.strip())
    if len(values) > MAX_ITEMS or any(len(v) > MAX_TEXT for v in values):
        raise ApiError(
            "invalid_request",
            f"query parameter {name} takes at most {MAX_ITEMS} values of {MAX_TEXT} characters",
        )
    return values


def _text(params: Mapping[str, str], name: str) -> str:
    raw = params.get(name) or ""
    if len(raw) > MAX_TEXT:
        raise ApiError(
            "invalid_request", f"query parameter {name} is longer than {MAX_TEXT} characters"
        )
    return raw


def _time(params: Mapping[str, str], name: str) -> str | None:
    raw = params.get(name)
    if not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise ApiError(
            "invalid_request",
            f"query parameter {name} must be an ISO 8601 time "
            f"(2026-01-02T03:04:05Z), not {raw[:40]!r}",
        ) from None
    if moment.tzinfo is None:  # a time without an offset is read as UTC
        moment = moment.replace(tzinfo=UTC)
    return format_time(moment.timestamp())


def _pairs(given: Sequence[str]) -> tuple[tuple[str, str], ...]:
    if len(given) > MAX_ITEMS:
        raise ApiError("invalid_request", f"at most {MAX_ITEMS} metadata parameters")
    pairs: list[tuple[str, str]] = []
    for raw in given:
        key, equals, value = raw.partition("=")
        if not equals or not key or len(raw) > MAX_TEXT:
            raise ApiError(
                "invalid_request",
                f"query parameter metadata must be KEY=VALUE (at most {MAX_TEXT} "
                f"characters), not {raw[:40]!r}",
            )
        pairs.append((key, value))
    return tuple(pairs)


def parse_query(params: Mapping[str, str], metadata: Sequence[str]) -> Query:
    """The request's filters and sort; `metadata` is every value of its `metadata` parameter."""
    states = _listed(params, "state")
    unknown = sorted(states - STATES)
    if unknown:
        known = ", ".join(sorted(STATES))
        raise ApiError("invalid_request", f"unknown state {unknown[0][:40]!r} (known: {known})")
    raw_sort = params.get("sort") or "updated"
    sort = SORTS.get(raw_sort)
    if sort is None:
        raise ApiError(
            "invalid_request",
            f"query parameter sort must be one of {', '.join(SORTS)}, not {raw_sort[:40]!r}",
        )
    after, before = _time(params, "created_after"), _time(params, "created_before")
    return Query(
        states=states,
        stop_reasons=_listed(params, "stop_reason"),
        models=_listed(params, "model"),
        id_prefix=_text(params, "id_prefix"),
        text=_text(params, "q").strip().lower(),
        created_after=after,
        created_before=before,
        metadata=_pairs(metadata),
        sort=sort,
    )
