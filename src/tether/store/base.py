"""The event store protocol and the rules every backend shares.

Owns `Store`, `SessionInfo`, `Lease`, the work queue's `Wakeup`, `Queued` and `Claimed`, and
batch validation. It does no I/O and knows no
backend: the backends (memory, SQLite, PostgreSQL) do the I/O, `store.open` opens one by URL,
and all pass `tether.testing`'s suite.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from tether.errors import CorruptLog, LeaseLost, UsageError
from tether.events import PAYLOAD_TYPES, SPARSE_FIELDS, Event, Payload, payload_to_json
from tether.messages import Message, Usage, canonical_json
from tether.store.catalog import Admit, CatalogQuery, CatalogRow, ExperimentEntry, UsageEntry


@dataclass(frozen=True, slots=True)
class SessionInfo:
    session_id: str
    last_seq: int
    created: str
    updated: str


@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's claim to run a session. Every claim gets a higher `generation`; an append
    made under an older generation is refused, so a paused worker can never write again
    after another took the session over."""

    session_id: str
    owner: str
    generation: int
    expires: float  # seconds since the epoch, by the store's clock


@dataclass(frozen=True, slots=True)
class Wakeup:
    """A session marked as having work for a runner. `token` grows with every mark, so a
    worker clears only the mark it saw, never one made while it ran."""

    session_id: str
    token: int


# Why a marked session is kept off the queue for a while: "parked", its model's backend cannot
# take a call until then (the gateway said how long); "backoff", its last run failed.
DeferReason = Literal["parked", "backoff"]
DEFER_REASONS: tuple[DeferReason, ...] = get_args(DeferReason)


@dataclass(frozen=True, slots=True)
class Queued:
    """A marked session that no worker may take before `not_before` (seconds since the epoch,
    by the store's clock), and why: what a status display shows ("parked until ...")."""

    session_id: str
    not_before: float
    reason: DeferReason


@dataclass(frozen=True, slots=True)
class Claimed:
    """A runnable session a worker now holds (`Store.claim_runnable`). `claims` counts claims
    of its lease since the last clean release: 1 for a session nobody ran before it or that
    was released cleanly; more after workers died holding it (past a bound, it is ended)."""

    wakeup: Wakeup
    lease: Lease
    claims: int


class News(Protocol):
    """Sessions that other processes appended to or marked, as a store pushes them (PostgreSQL's
    LISTEN/NOTIFY). `wait` returns their ids, or an empty set after `seconds` of quiet."""

    async def wait(self, seconds: float) -> set[str]: ...

    def close(self) -> None: ...


class EventLog(Protocol):
    """Each session's append-only log of events.

    `append` is atomic per batch. It refuses a batch whose `expected_seq` is not the log's
    last seq (`Conflict`), except a retried batch whose event ids are already stored at
    exactly those seqs, which it accepts once more without writing anything. With a `lease`,
    it also refuses the batch (`LeaseLost`) unless that lease is the session's current one.
    Without one it is a control-plane append (a user message, a decision, a cancel request):
    anyone may make those, and the worker holding the lease acts on them."""

    async def append(
        self,
        session_id: str,
        events: Sequence[Event],
        expected_seq: int,
        lease: Lease | None = None,
        *,
        row: CatalogRow | None = None,
        admit: Admit | None = None,
    ) -> None:
        """... and, in the same transaction, the session's catalog row: `row` as the writer's
        fold gives it after the batch (`catalog.row_of`), or, without one, the store's own
        fold of the whole log (`catalog.row_for_log`). With `admit`, refused with
        `QuotaExceeded` (before anything is written) when the tenant already runs its
        quota of sessions (`catalog.Admit`)."""
        ...

    async def read(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """The session's events after `after_seq`, in seq order: at most `limit` of them (the
        first ones), or all with None. A reader that pages asks again after the last seq."""
        ...

    async def last_seq(self, session_id: str) -> int: ...

    async def last_seqs(self, session_ids: Sequence[str]) -> dict[str, int]:
        """The last seq of each named session that has events, in one round trip."""
        ...

    async def sessions(self, limit: int = 100) -> list[SessionInfo]: ...


@dataclass(frozen=True, slots=True)
class ForkLink:
    """A forked session's place in its parent: its log is the parent's events 1 to `at`,
    then its own from `at + 1` (the first of them its `session.forked`)."""

    parent: str
    at: int


class Forks(Protocol):
    """Sessions whose logs begin with another's: a fork references its parent's prefix and
    copies nothing of it, so forking costs the same at any length (`session/fork.py`).

    Every read of a fork's log (`read`) gives the parent's events up to the fork point, then
    its own, all named with the fork's session id, as if one log; `last_seq` is the fork's
    own last seq. A parent may itself be a fork: reads follow the chain."""

    async def fork(
        self, session_id: str, link: ForkLink, events: Sequence[Event], *, row: CatalogRow
    ) -> None:
        """Create `session_id` as a fork of `link.parent` at `link.at`, with `events` (seqs
        from `at + 1`, the first a `session.forked`) and its catalog row, in one transaction;
        the parent's snapshot comes along when it is at `at` or before (its bytes as they are:
        the child's fold starts there). Refused with `SessionNotFound` when the parent has
        no event at `at`, and with `Conflict` when `session_id` already has events, unless this is the
        same fork retried (the same link, the same event ids at those seqs), accepted once."""
        ...

    async def fork_link(self, session_id: str) -> ForkLink | None:
        """Where `session_id` was forked from; None for a session that is not a fork."""
        ...


class Catalog(Protocol):
    """The session catalog (`store/catalog.py`): one row per session, written with its log's
    appends, read by every listing, search, count and quota. No method here reads a log."""

    async def catalog(self, query: CatalogQuery) -> list[CatalogRow]:
        """A keyset page: the rows `query` lets through after its cursor, in its sort, at most
        `query.limit`; the same rows `catalog.page_of` gives over every row."""
        ...

    async def catalog_counts(self, query: CatalogQuery) -> dict[str, int]:
        """Sessions per state among those every filter of `query` but its states lets
        through (`catalog.counts_of`); cursor, sort and limit are ignored."""
        ...

    async def catalog_row(self, session_id: str) -> CatalogRow | None: ...

    async def catalog_experiments(
        self, tenant: str | None, limit: int = 100
    ) -> list[ExperimentEntry]:
        """The experiments whose runs the catalog holds (`catalog.experiments_of`)."""
        ...

    async def catalog_usage(
        self, tenant: str | None, since: str, until: str, limit: int = 10_000
    ) -> list[UsageEntry]:
        """Tokens and cost of the sessions last updated in [`since`, `until`), by the UTC
        day of that update and model (`catalog.usage_of`): one aggregate over the tenant's
        rows in that window, read by its `updated` index."""
        ...

    async def put_catalog_row(self, row: CatalogRow) -> bool:
        """Write a rebuilt row, only if the session's log still ends at `row.last_seq`
        (atomically with that check); False when it did not (an append wrote a newer one)."""
        ...

    async def session_ids(self, after: str = "", limit: int = 1000) -> list[str]:
        """Every session's id after `after`, in id order: how a rebuild walks the store."""
        ...

    async def count_sessions(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A session's fold as of `seq`, encoded by `snapshot.encode` under `version` (a reader
    of another version ignores it and folds the log)."""

    session_id: str
    seq: int
    version: str
    data: bytes


class Snapshots(Protocol):
    """The newest fold snapshot of each session: a cache of its log, never its truth."""

    async def put_snapshot(self, snapshot: Snapshot) -> None:
        """Keep it as the session's snapshot unless the one kept is at a later seq."""
        ...

    async def get_snapshot(self, session_id: str) -> Snapshot | None: ...


class Leases(Protocol):
    """Who runs each session: a lease per session, fencing the appends made under it."""

    async def claim(self, session_id: str, owner: str, ttl: float) -> Lease:
        """Take the session's lease if it is free or expired (`LeaseHeld` otherwise). Every
        claim counts one more claim of the lease; a clean `release` sets the count to 0."""
        ...

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend a lease still held (`LeaseLost` otherwise)."""
        ...

    async def release(self, lease: Lease) -> None:
        """Give a lease up; a lease already lost is not an error."""
        ...

    async def current_lease(self, session_id: str) -> Lease | None:
        """The session's lease if one is held and unexpired."""
        ...

    async def acquit(self, lease: Lease) -> None:
        """Forgive the deaths counted on the session's lease: the workers that died holding
        it were not killed by it (nothing of its was in flight). Its count of claims becomes
        1, the claim `lease` made; a lease no longer current is left as it is."""
        ...


class WorkQueue(Protocol):
    """The sessions with work for a runner: marks, claims and not-before times."""

    async def mark_runnable(self, session_id: str) -> None:
        """Note that the session has work for a runner (it was started, sent a message or a
        decision, or asked to stop). Marking a marked session bumps its token, keeps its place
        and keeps its not-before time (`defer`): a message to a parked session does not make
        it run sooner, since its model call would only park again."""
        ...

    async def runnable(self, limit: int = 100) -> list[Wakeup]:
        """Marked sessions that no unexpired lease holds and no deferral keeps back, oldest
        mark first: what workers poll instead of folding every log."""
        ...

    async def claim_runnable(
        self, owner: str, ttl: float, limit: int = 1, *, alone: bool = True
    ) -> list[Claimed]:
        """Claim up to `limit` runnable sessions (as `runnable` lists them) for `owner` for
        `ttl` seconds, oldest mark first, atomically: workers asking at once get different
        sessions. Each claim counts one more claim of the lease.

        A *takeover* is a session whose lease ran out with claims counted (its worker died
        or hung holding it), fewer than `SUSPECT_CLAIMS`: any worker takes it, before fresh
        work, oldest expiry first, as many as its `limit`. A *suspect* ran out with
        `SUSPECT_CLAIMS` or more (its workers died holding it that many times in a row, no
        death forgiven: `acquit`): it goes only to a claim that may take one (`alone`: the
        worker runs no other suspect), by itself, first; so no worker runs two sessions that
        kill workers, and a claim with `alone` False is never handed one.
        `UsageError` for a `limit` below 1."""
        ...

    async def clear_runnable(self, wakeup: Wakeup) -> bool:
        """Remove the mark (and any deferral) unless it was bumped since `wakeup` was read;
        True if removed."""
        ...

    async def defer(self, session_id: str, seconds: float, reason: DeferReason) -> None:
        """Keep the session's mark off `runnable` and `claim_runnable` for `seconds` from now
        (by the store's clock), replacing any earlier not-before time; 0 lifts a deferral.
        The token is not bumped. A session with no mark is marked: a deferral says the session
        has work to come back to, and a parked or failed run that lost its mark must not be
        stranded. `UsageError` for a negative or non-finite time or an unknown reason."""
        ...

    async def queued(self, session_id: str) -> Queued | None:
        """The session's not-before time and its reason while its mark is deferred into the
        future; None when it is not marked or may be run now."""
        ...


class Blobs(Protocol):
    """Content-addressed bytes: what a log refers to rather than holds."""

    async def put_blob(self, data: bytes) -> str:
        """Keep `data` under its sha256 (hex), which it returns; storing it twice is a no-op."""
        ...

    async def get_blob(self, digest: str) -> bytes | None:
        """The data stored under `digest`, or None."""
        ...


class Store(EventLog, Forks, Catalog, Snapshots, Leases, WorkQueue, Blobs, Protocol):
    """A backend: all four parts above, news, readiness and closing. Every backend (memory,
    SQLite, PostgreSQL) implements all of it and passes `tether.testing.STORE_CHECKS`."""

    url: str

    def subscribe(self) -> News | None:
        """News of other processes' appends and marks, pushed, for a watcher or a worker to
        wake at once; None from a store that pushes none (its readers poll)."""
        ...

    async def ready(self) -> None:
        """Check that the store takes a write and a read now (a readiness probe): return, or
        raise `StoreUnavailable` saying why not. It writes only a fixed health record. A store
        whose file was deleted or replaced under it, or in which damage was found (by
        `check_integrity`, by any read, or by the few pages this check reads), is not ready.
        Cheap enough for a probe every second."""
        ...

    async def check_integrity(self, *, whole: bool = True) -> None:
        """Read what is stored once, for a process about to write (a server starting,
        `tether run`): raise `CorruptLog` saying what is damaged, in words that quote nothing
        stored. SQLite runs `PRAGMA quick_check` on a connection and thread of its own, so
        reads go on meanwhile (time grows with the file: seconds at a million sessions);
        `whole=False` checks a file past `sqlite_health.WHOLE_CHECK_BYTES` by its newest
        pages only.
        PostgreSQL and the memory store check nothing (the database server guards its own
        pages)."""
        ...

    async def close(self) -> None: ...


EventRow = tuple[str, int, str, str, str, str, str]  # session_id, seq, id, time, thread, type, data


def event_to_row(event: Event) -> EventRow:
    """How SQL stores keep an event: its envelope in columns, its payload as `payload_data`."""
    payload = event.payload
    data = payload_data(payload)
    return (event.session_id, event.seq, event.id, event.time, event.thread, payload.type, data)


def payload_data(payload: Payload) -> str:
    """A payload as SQL stores keep it: its canonical JSON. A payload holding a lone surrogate
    (a model's `"\\ud800"`, read by `json.loads`) has no UTF-8 form: it is kept with every
    non-ASCII character escaped, which reads back the same, so one odd string fails neither
    its own append nor the others committed with it."""
    data = _fast_canonical(payload)
    if not data.isascii():
        try:
            data.encode("utf-8")
        except UnicodeEncodeError:
            data = json.dumps(
                payload_to_json(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=True
            )
    return data


# `canonical_json(payload_to_json(p))` without setting up an encoder per call: CPython's C
# encoder, made once with `canonical_json`'s settings. The payload's own fields are turned
# into a dict here, one level only, as `payload_to_json` does; the encoder's fallback
# refuses everything else, so a value that is not JSON goes the long way and raises there.
# Per payload type: its fields, and those written only when they hold something (`SPARSE`).
_FIELDS: dict[type, tuple[tuple[str, ...], frozenset[str]]] = {
    cls: (tuple(f.name for f in dataclasses.fields(cls)), SPARSE_FIELDS[cls])
    for cls in PAYLOAD_TYPES.values()
}


def _refuse(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON")


def _make_encoder() -> Callable[[object, int], Any] | None:
    try:
        from _json import make_encoder
    except ImportError:  # not CPython: the long way only
        return None
    return make_encoder(
        None, _refuse, json.encoder.encode_basestring, None, ":", ",", True, False, True
    )


_ENCODER = _make_encoder()


# The field values that are objects with `to_json` (typed: mypy narrows by the class check).
_NESTED: frozenset[type[Message | Usage]] = frozenset({Message, Usage})


def _fast_canonical(payload: Payload) -> str:
    known = _FIELDS.get(type(payload))
    if _ENCODER is not None and known is not None:
        names, sparse = known
        fields: dict[str, object] = {}
        for name in names:
            value = getattr(payload, name)
            # A class check, not `isinstance(value, Message | Usage)`: that builds the union
            # anew for every field of every event.
            fields[name] = value.to_json() if value.__class__ in _NESTED else value
        if sparse:
            for name in sparse:
                if not fields[name]:
                    del fields[name]
        try:
            return "".join(_ENCODER(fields, 0))
        except (TypeError, ValueError, RecursionError):
            pass
    return canonical_json(payload_to_json(payload))


def event_from_row(row: Sequence[Any]) -> Event:
    """The inverse of `event_to_row`; a row that cannot be read is `CorruptLog`."""
    try:
        data = json.loads(row[6])
    except (TypeError, ValueError) as exc:  # the message would quote the stored text
        raise CorruptLog(f"session {row[0]!s:.100}: an event's data is not JSON") from exc
    return Event.from_json(
        {
            "session_id": row[0],
            "seq": row[1],
            "id": row[2],
            "time": row[3],
            "thread": row[4],
            "type": row[5],
            "data": data,
        }
    )


UNDECODABLE = "a stored event that does not decode"


def unreadable(session_id: str, kind: str, rows: Sequence[Sequence[Any]] = ()) -> CorruptLog:
    """The error for a session whose log cannot be read: its id, the seq of the first of
    `rows` that does not decode, and the kind of failure; never what is stored (a torn page
    may hold another tenant's text)."""
    where = ""
    for row in rows:
        try:
            event_from_row(row)
        except CorruptLog:
            where = f" at seq {row[1]!s:.20}"
            break
    return CorruptLog(f"session {session_id}: its stored log cannot be read{where}: {kind}")


# What `ready` writes and reads back in the stores that keep it as a blob.
READY_BLOB = b"tether readiness check"


def check_batch(session_id: str, events: Sequence[Event], expected_seq: int) -> None:
    """Refuse a batch that is malformed whatever the log holds: a usage error, not a conflict."""
    if not events:
        raise UsageError("append needs at least one event")
    for offset, event in enumerate(events, start=1):
        if event.session_id != session_id:
            raise UsageError(
                f"event {event.id} belongs to session {event.session_id}, not {session_id}"
            )
        if event.seq != expected_seq + offset:
            raise UsageError(
                f"event {event.id} has seq {event.seq}; a batch after seq {expected_seq} "
                f"must be numbered from {expected_seq + 1} without gaps"
            )


def check_limit(limit: int | None) -> None:
    if limit is not None and limit < 0:
        raise UsageError(f"a read limit must be 0 or more, not {limit}")


def lease_refusal(session_id: str, held: Lease | None, lease: Lease) -> LeaseLost | None:
    """Why an append under `lease` must be refused, given the lease the store holds."""
    # A released lease keeps its generation but not its owner: it fences like a lost one.
    if held is None or held.generation != lease.generation or not held.owner:
        now_held = (
            f"generation {held.generation} ({held.owner or 'released'})" if held else "no lease"
        )
        return LeaseLost(
            f"session {session_id}: lease generation {lease.generation} of {lease.owner} "
            f"is no longer current; the store holds {now_held}"
        )
    return None


# Claims counted on a lease that ran out from which its session is a suspect
# (`WorkQueue.claim_runnable`): it ran out twice before, neither death forgiven.
SUSPECT_CLAIMS = 3


def check_ttl(ttl: float) -> None:
    if not ttl > 0:
        raise UsageError(f"a lease needs a positive ttl, not {ttl!r}")


def check_defer(seconds: float, reason: str) -> None:
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise UsageError(f"a deferral needs a finite number of seconds, 0 or more, not {seconds!r}")
    if reason not in DEFER_REASONS:
        raise UsageError(
            f"a deferral's reason is one of {', '.join(DEFER_REASONS)}, not {reason!r}"
        )


def check_claim(ttl: float, limit: int) -> None:
    check_ttl(ttl)
    if limit < 1:
        raise UsageError(f"claim_runnable needs a limit of at least 1, not {limit!r}")


def is_retry(stored_ids: Sequence[str], batch_ids: Sequence[str]) -> bool:
    """A batch whose ids stand at its seqs already was written by an earlier try of this call."""
    return len(stored_ids) == len(batch_ids) and list(stored_ids) == list(batch_ids)


def redact_url(url: str) -> str:
    """The URL with any password replaced, for printing: `postgresql://u:***@host/db`."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"
