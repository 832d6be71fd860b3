"""The session list of `tether serve`: cursor (keyset) pages of one tenant's sessions, filtered
and sorted as `listquery.Query` says, with tokens, cost and task per row and, when asked, the
count of matching sessions per state. It writes nothing. It reads the store's listing, each
session's first two events (tenant, metadata, task: written once, so kept) and each session's
fold through the tenant's runtime (kept until the store lists a newer seq for it). A session
whose log cannot be read (a damaged store file) is left out and named in the page's
`unreadable`, to its tenant only; the other sessions are listed as ever."""

from __future__ import annotations

import itertools
import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tether.bounded import ByteLRU
from tether.errors import CorruptLog, SessionNotFound
from tether.events import SessionCreated, UserMessage
from tether.messages import JSONObject, JSONValue
from tether.runtime.base import RESERVED_METADATA, SessionRef, SessionSummary
from tether.runtime.local import LocalRuntime
from tether.server.listquery import Key, Query, encode_cursor
from tether.store.base import SessionInfo

# The newest sessions of the store a listing looks through, every tenant's together: the
# store lists no tenant and takes no cursor, so each page sorts this window itself.
SCAN = 10_000
KEPT = 2 * SCAN  # sessions whose first events and row a `Listing` keeps
TEXT = 2_000  # characters of a task or a metadata value kept to search and filter by
KEPT_KEYS = 100  # metadata keys kept to filter by (the API takes 64 at a start, by default)
KEPT_BYTES = 32 << 20  # what a `Listing`'s origins hold at most, and its rows as much again
SHOWN = 300  # characters of the task, and of each metadata value, a row carries
SHOWN_KEYS = 20  # metadata keys a row carries
NUMERIC = ("tokens", "cost")
log = logging.getLogger("tether.server")
# `canonical_json`'s form, written piece by piece: a value's text is cut at `TEXT`
# characters without encoding the rest of it.
_PIECES = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Origin:
    """What a session's first events say, which never changes: whose it is, and what for."""

    tenant: str | None
    task: str
    metadata: dict[str, str]  # the caller's metadata (not the runtime's keys), values as text
    haystack: str  # lower case: what `q` is looked for in

    def size(self) -> int:
        """About the bytes it holds (its texts twice: as given, and in the haystack)."""
        return 256 + len(self.haystack) * 2 + 64 * len(self.metadata)


@dataclass(frozen=True, slots=True)
class Row:
    """A session's line as of `last_seq`."""

    summary: SessionSummary
    tokens: int
    cost_usd: float | None
    last_seq: int

    def size(self) -> int:
        summary = self.summary
        return 512 + len(summary.model) + len(summary.last_output) + len(summary.session_id)


@dataclass(frozen=True, slots=True)
class Entry:
    info: SessionInfo
    origin: Origin
    row: Row

    def to_json(self) -> JSONObject:
        shown = list(self.origin.metadata.items())[:SHOWN_KEYS]
        return {
            **self.row.summary.to_json(),
            "task": self.origin.task[:SHOWN],
            "tokens": self.row.tokens,
            "cost_usd": self.row.cost_usd,
            "metadata": {k: v[:SHOWN] for k, v in shown},
        }


@dataclass(frozen=True, slots=True)
class Page:
    sessions: list[JSONObject]
    next_cursor: str | None  # None: this is the last page
    counts: dict[str, int] | None  # per state, of the sessions every other filter lets through
    unreadable: list[str]  # the tenant's sessions looked at for this page that cannot be read


def origin_of(first: Sequence[object], session_id: str) -> Origin:
    created = first[0] if first and isinstance(first[0], SessionCreated) else None
    message = first[1] if len(first) > 1 and isinstance(first[1], UserMessage) else None
    raw = created.metadata if created is not None else {}
    tenant = raw.get("tenant")
    caller = (item for item in raw.items() if item[0] not in RESERVED_METADATA)
    metadata = {key[:TEXT]: as_text(value) for key, value in itertools.islice(caller, KEPT_KEYS)}
    task = message.message.text[:TEXT] if message is not None else ""
    haystack = "\n".join([session_id, task, *metadata.values()]).lower()
    return Origin(tenant if isinstance(tenant, str) else None, task, metadata, haystack)


def as_text(value: JSONValue) -> str:
    """A metadata value as the list shows and filters it: a string as it is, anything else
    as its canonical JSON; either cut at `TEXT` characters, the rest never encoded."""
    if isinstance(value, str):
        return value[:TEXT]
    pieces: list[str] = []
    written = 0
    for piece in _PIECES.iterencode(value):
        pieces.append(piece)
        written += len(piece)
        if written >= TEXT:
            break
    return "".join(pieces)[:TEXT]


def matches(entry: Entry, query: Query, *, states: bool = True) -> bool:
    """Whether the entry passes every filter of `query` (its states only with `states`)."""
    summary, origin = entry.row.summary, entry.origin
    return (
        (not states or not query.states or summary.state in query.states)
        and (not query.stop_reasons or (summary.stop_reason or "") in query.stop_reasons)
        and (not query.models or summary.model in query.models)
        and (not query.text or query.text in origin.haystack)
        and all(origin.metadata.get(k) == v for k, v in query.metadata)
    )


def cheap_match(info: SessionInfo, query: Query) -> bool:
    """The filters the store's listing answers alone, tried before any read."""
    return (
        info.session_id.startswith(query.id_prefix)
        and (query.created_after is None or info.created >= query.created_after)
        and (query.created_before is None or info.created < query.created_before)
    )


def time_key(info: SessionInfo, query: Query) -> Key:
    return (info.updated if query.sort == "updated" else info.created, info.session_id)


def key_of(entry: Entry, query: Query) -> Key:
    if query.sort == "tokens":
        return (float(entry.row.tokens), entry.info.session_id)
    if query.sort == "cost":
        cost = entry.row.cost_usd
        return (-1.0 if cost is None else cost, entry.info.session_id)
    return time_key(entry.info, query)


def below(a: Key, b: Key) -> bool:
    """`a < b`, for keys of one sort (`listquery.decode_cursor` refuses another sort's)."""
    if isinstance(a[0], str) or isinstance(b[0], str):
        return (str(a[0]), a[1]) < (str(b[0]), b[1])
    return (a[0], a[1]) < (b[0], b[1])


def after(key: Key, cursor: Key | None, ascending: bool) -> bool:
    """Whether a row with `key` comes after the cursor's row in the sort."""
    if cursor is None:
        return True
    return below(cursor, key) if ascending else below(key, cursor)


class Listing:
    """One server's session list: the origins and rows it has read, the least recently
    listed dropped past `size` sessions or `budget` bytes of each."""

    def __init__(self, size: int = KEPT, budget: int = KEPT_BYTES) -> None:
        self.size = size
        self.origins: ByteLRU[str, Origin] = ByteLRU(size, budget)
        self.rows: ByteLRU[str, Row] = ByteLRU(size, budget)
        self.reads = 0  # first-events reads and polls made, for tests and benchmarks

    async def entry(self, rt: LocalRuntime, info: SessionInfo) -> Entry | None:
        """The session's entry, or None when it is not this tenant's (nor anybody's yet).
        `CorruptLog` for the tenant's session that cannot be read; one whose first events
        cannot be read is nobody's but an unauthenticated server's (whose it is is unknown)."""
        sid = info.session_id
        origin = self.origins.get(sid)
        if origin is None:
            self.reads += 1
            try:
                first = [e.payload for e in await rt.store.read(sid, 0, limit=2)]
            except CorruptLog as exc:
                if rt.tenant is not None:
                    log.warning("listing left out a session nobody can be told of: %s", exc)
                    return None
                raise
            if not first:
                return None
            origin = origin_of(first, sid)
            self.origins.put(sid, origin, origin.size())
        # The tenant check of `LocalRuntime._folder`, made before any fold is read; the poll
        # below makes it again.
        if rt.tenant is not None and origin.tenant != rt.tenant:
            return None
        row = self.rows.get(sid)
        if row is None or row.last_seq < info.last_seq:
            self.reads += 1
            try:
                view = (await rt.poll(SessionRef(sid))).view
            except SessionNotFound:
                return None
            summary = SessionSummary.of(view, info.created, info.updated)
            row = Row(summary, view.usage.total_tokens, view.cost_usd, view.last_seq)
            self.rows.put(sid, row, row.size())
        if (row.summary.created, row.summary.updated) != (info.created, info.updated):
            # The listing's times, as the sort and the cursor use them.
            summary = replace(row.summary, created=info.created, updated=info.updated)
            row = replace(row, summary=summary)
        return Entry(info, origin, row)

    async def page(
        self, rt: LocalRuntime, limit: int, query: Query, cursor: Key | None, counts: bool
    ) -> Page:
        """Up to `limit` of the tenant's sessions that `query` lets through, after `cursor` in
        its sort, and the cursor of the next page. Sorted by time, a session updated after a
        page was read moves to the top, so a client paging down does not see it again; sorted
        by tokens or cost, one that grew past the cursor meanwhile is not seen again either,
        and one still below it is seen where it now sorts."""
        infos = [i for i in await rt.store.sessions(limit=SCAN) if cheap_match(i, query)]
        ascending = query.sort == "oldest"
        found: list[Entry] = []
        tally: Counter[str] | None = None
        unreadable: list[str] = []
        if query.sort in NUMERIC or counts:
            # Every candidate is read: the sort, or the counts, need them all.
            entries = [e for i in infos if (e := await self._entry(rt, i, unreadable)) is not None]
            entries = [e for e in entries if matches(e, query, states=False)]
            tally = Counter(e.row.summary.state for e in entries) if counts else None
            entries = [e for e in entries if matches(e, query)]
            entries.sort(key=lambda e: key_of(e, query), reverse=not ascending)
            found = [e for e in entries if after(key_of(e, query), cursor, ascending)][: limit + 1]
        else:
            infos.sort(key=lambda i: time_key(i, query), reverse=not ascending)
            for info in infos:
                if not after(time_key(info, query), cursor, ascending):
                    continue
                entry = await self._entry(rt, info, unreadable)
                if entry is None or not matches(entry, query):
                    continue
                found.append(entry)
                if len(found) > limit:  # one past the page says there is a next one
                    break
        rows = found[:limit]
        more = len(found) > limit
        next_cursor = encode_cursor(query.sort, key_of(rows[-1], query)) if more else None
        return Page(
            [e.to_json() for e in rows],
            next_cursor,
            None if tally is None else dict(tally),
            unreadable,
        )

    async def _entry(
        self, rt: LocalRuntime, info: SessionInfo, unreadable: list[str]
    ) -> Entry | None:
        """`entry`, a session that cannot be read noted in `unreadable` instead."""
        try:
            return await self.entry(rt, info)
        except CorruptLog:
            unreadable.append(info.session_id)
            return None
