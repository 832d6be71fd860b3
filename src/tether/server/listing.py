"""The session list of `tether serve`: cursor (keyset) pages of one tenant's sessions, the most
recently updated first, filtered by state and by session id prefix. It reads the store's
listing and each session's fold through the tenant's runtime; it stores nothing, and the
cursor is opaque to clients (base64url JSON of the last row's `(updated, session_id)`)."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import get_args

from tether.errors import SessionNotFound
from tether.runtime.base import SessionRef, SessionSummary
from tether.runtime.local import LocalRuntime
from tether.server.errors import ApiError
from tether.state import State

# The newest sessions of the store a listing looks through, every tenant's together: the
# store lists no tenant and takes no cursor, so each page sorts this window itself.
SCAN = 10_000
STATES: frozenset[str] = frozenset(get_args(State))
MAX_PREFIX = 200
Key = tuple[str, str]  # (updated, session_id): rows are ordered by it, descending


@dataclass(frozen=True, slots=True)
class Page:
    sessions: list[SessionSummary]
    next_cursor: str | None  # None: this is the last page


def encode_cursor(key: Key) -> str:
    raw = json.dumps(list(key), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> Key:
    """The key a cursor carries, or `invalid_request` for anything this module did not write."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        updated, session_id = json.loads(raw)
        if isinstance(updated, str) and isinstance(session_id, str):
            return updated, session_id
    except (binascii.Error, ValueError, TypeError):
        pass
    raise ApiError("invalid_request", f"cursor {cursor[:40]!r} is not one this server gave")


def parse_states(raw: str | None) -> frozenset[str]:
    """`state=idle,failed`: the states a row may be in (none: any)."""
    if not raw:
        return frozenset()
    states = frozenset(s.strip() for s in raw.split(",") if s.strip())
    unknown = sorted(states - STATES)
    if unknown:
        known = ", ".join(sorted(STATES))
        raise ApiError("invalid_request", f"unknown state {unknown[0][:40]!r} (known: {known})")
    return states


def parse_prefix(raw: str | None) -> str:
    if raw is not None and len(raw) > MAX_PREFIX:
        raise ApiError("invalid_request", f"id_prefix is longer than {MAX_PREFIX} characters")
    return raw or ""


async def page(
    rt: LocalRuntime,
    limit: int,
    *,
    cursor: Key | None = None,
    states: frozenset[str] = frozenset(),
    id_prefix: str = "",
) -> Page:
    """Up to `limit` of the tenant's sessions older than `cursor` (by `(updated, id)`), and the
    cursor of the next page. A session updated after a page was read moves to the top, so a
    client paging down does not see it again on a later page."""
    infos = await rt.store.sessions(limit=SCAN)
    ordered = sorted(infos, key=lambda i: (i.updated, i.session_id), reverse=True)
    found: list[tuple[Key, SessionSummary]] = []
    for info in ordered:
        key = (info.updated, info.session_id)
        if (cursor is not None and key >= cursor) or not info.session_id.startswith(id_prefix):
            continue
        try:
            status = await rt.poll(SessionRef(info.session_id))
        except SessionNotFound:  # another tenant's
            continue
        if states and status.view.state not in states:
            continue
        found.append((key, SessionSummary.of(status.view, info.created, info.updated)))
        if len(found) > limit:  # one past the page says there is a next one
            break
    more = len(found) > limit
    rows = found[:limit]
    return Page([s for _, s in rows], encode_cursor(rows[-1][0]) if more else None)
