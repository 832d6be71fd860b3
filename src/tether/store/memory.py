"""An in-process event store for tests and benchmarks: events kept as objects, never encoded."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import time
from collections.abc import Callable, Iterator, Sequence

from tether.errors import Conflict, LeaseHeld, QuotaExceeded, SessionNotFound, StoreUnavailable
from tether.events import Event
from tether.store import catalog
from tether.store.base import (
    READY_BLOB,
    SUSPECT_CLAIMS,
    Claimed,
    DeferReason,
    ForkLink,
    Lease,
    Queued,
    SessionInfo,
    Snapshot,
    Wakeup,
    check_batch,
    check_claim,
    check_defer,
    check_limit,
    check_ttl,
    is_retry,
    lease_refusal,
)
from tether.store.catalog import Admit, CatalogQuery, CatalogRow, ExperimentEntry, UsageEntry


class MemoryStore:
    """`clock` is the store's own clock for lease expiry; tests pass a virtual one."""

    url = "memory:"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._logs: dict[str, list[Event]] = {}  # each session's own events
        self._links: dict[str, ForkLink] = {}  # a fork's own events begin after its link's `at`
        self._leases: dict[str, Lease] = {}
        self._claims: dict[str, int] = {}  # session id -> claims since the last clean release
        self._clock = clock
        self._wakeups: dict[str, int] = {}  # session id -> token; insertion order is age
        self._deferred: dict[str, tuple[float, DeferReason]] = {}  # of marked sessions only
        self._blobs: dict[str, bytes] = {}
        self._rows: dict[str, CatalogRow] = {}
        self._snapshots: dict[str, Snapshot] = {}

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
        check_batch(session_id, events, expected_seq)
        if lease is not None:
            refusal = lease_refusal(session_id, self._leases.get(session_id), lease)
            if refusal is not None:
                raise refusal
        last = self._last(session_id)
        if last != expected_seq:
            stored = [e.id for e in self._read(session_id, expected_seq, len(events))]
            if is_retry(stored, [e.id for e in events]):
                return
            raise Conflict(session_id, expected_seq, last)
        if admit is not None:
            self._admit(session_id, admit)
        self._logs.setdefault(session_id, []).extend(events)
        self._rows[session_id] = (
            row if row is not None else catalog.row_for_log(self._read(session_id, 0, None))
        )

    async def fork(
        self, session_id: str, link: ForkLink, events: Sequence[Event], *, row: CatalogRow
    ) -> None:
        check_batch(session_id, events, link.at)
        if session_id in self._logs:
            stored = [e.id for e in self._read(session_id, link.at, len(events))]
            if self._links.get(session_id) == link and is_retry(stored, [e.id for e in events]):
                return
            raise Conflict(session_id, 0, self._last(session_id))
        if link.at < 1 or self._last(link.parent) < link.at:
            raise SessionNotFound(f"session {link.parent} has no event at seq {link.at}")
        self._links[session_id] = link
        self._logs[session_id] = list(events)
        self._rows[session_id] = row
        kept = self._snapshots.get(link.parent)
        if kept is not None and kept.seq <= link.at:
            self._snapshots[session_id] = dataclasses.replace(kept, session_id=session_id)

    async def fork_link(self, session_id: str) -> ForkLink | None:
        return self._links.get(session_id)

    def _base(self, session_id: str) -> int:
        link = self._links.get(session_id)
        return 0 if link is None else link.at

    def _last(self, session_id: str) -> int:
        return self._base(session_id) + len(self._logs.get(session_id, ()))

    def _read(self, session_id: str, after_seq: int, limit: int | None) -> list[Event]:
        """The log after `after_seq`, a fork's prefix read from its parents and named as
        its own."""
        out: list[Event] = []
        link = self._links.get(session_id)
        base = 0 if link is None else link.at
        if link is not None and after_seq < base:
            take = base - after_seq if limit is None else min(limit, base - after_seq)
            out = [
                dataclasses.replace(e, session_id=session_id)
                for e in self._read(link.parent, after_seq, take)
            ]
            after_seq += len(out)
            if limit is not None:
                limit -= len(out)
        own = self._logs.get(session_id, [])
        start = after_seq - base
        out.extend(own[start:] if limit is None else own[start : start + limit])
        return out

    def _admit(self, session_id: str, admit: Admit) -> None:
        running = sum(
            1
            for r in self._rows.values()
            if r.tenant == admit.tenant and r.running and r.session_id != session_id
        )
        if running >= admit.max_running:
            raise QuotaExceeded(catalog.refusal(admit, running), catalog.RUNNING_RETRY_AFTER)

    async def catalog(self, query: CatalogQuery) -> list[CatalogRow]:
        return catalog.page_of(list(self._rows.values()), query)

    async def catalog_counts(self, query: CatalogQuery) -> dict[str, int]:
        return catalog.counts_of(list(self._rows.values()), query)

    async def catalog_row(self, session_id: str) -> CatalogRow | None:
        return self._rows.get(session_id)

    async def catalog_experiments(
        self, tenant: str | None, limit: int = 100
    ) -> list[ExperimentEntry]:
        return catalog.experiments_of(list(self._rows.values()), tenant, limit)

    async def catalog_usage(
        self, tenant: str | None, since: str, until: str, limit: int = 10_000
    ) -> list[UsageEntry]:
        return catalog.usage_of(list(self._rows.values()), tenant, since, until, limit)

    async def put_catalog_row(self, row: CatalogRow) -> bool:
        if self._last(row.session_id) != row.last_seq:
            return False
        self._rows[row.session_id] = row
        return True

    async def session_ids(self, after: str = "", limit: int = 1000) -> list[str]:
        return sorted(sid for sid in self._logs if sid > after)[:limit]

    async def count_sessions(self) -> int:
        return len(self._logs)

    async def put_snapshot(self, snapshot: Snapshot) -> None:
        kept = self._snapshots.get(snapshot.session_id)
        if kept is None or kept.seq <= snapshot.seq:
            self._snapshots[snapshot.session_id] = snapshot

    async def get_snapshot(self, session_id: str) -> Snapshot | None:
        return self._snapshots.get(session_id)

    async def read(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        check_limit(limit)
        return self._read(session_id, after_seq, limit)

    async def last_seq(self, session_id: str) -> int:
        return self._last(session_id)

    async def last_seqs(self, session_ids: Sequence[str]) -> dict[str, int]:
        return {sid: self._last(sid) for sid in session_ids if self._logs.get(sid)}

    async def sessions(self, limit: int = 100) -> list[SessionInfo]:
        rows = catalog.page_of(list(self._rows.values()), CatalogQuery(limit=limit))
        return [SessionInfo(r.session_id, r.last_seq, r.created, r.updated) for r in rows]

    async def claim(self, session_id: str, owner: str, ttl: float) -> Lease:
        check_ttl(ttl)
        now = self._clock()
        held = self._leases.get(session_id)
        if held is not None and held.expires > now and held.owner != owner:
            raise LeaseHeld(session_id, held.owner, held.expires)
        return self._take(session_id, owner, now + ttl)

    def _take(self, session_id: str, owner: str, expires: float) -> Lease:
        """A new generation of the session's lease for `owner`, one more claim counted."""
        held = self._leases.get(session_id)
        lease = Lease(session_id, owner, (held.generation if held else 0) + 1, expires)
        self._leases[session_id] = lease
        self._claims[session_id] = self._claims.get(session_id, 0) + 1
        return lease

    def subscribe(self) -> None:
        return None  # nothing is pushed: readers poll

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        check_ttl(ttl)
        refusal = lease_refusal(lease.session_id, self._leases.get(lease.session_id), lease)
        if refusal is not None:
            raise refusal
        renewed = Lease(lease.session_id, lease.owner, lease.generation, self._clock() + ttl)
        self._leases[lease.session_id] = renewed
        return renewed

    async def release(self, lease: Lease) -> None:
        held = self._leases.get(lease.session_id)
        if held is not None and held.generation == lease.generation:
            # Keep the generation, so the next claim still gets a higher one.
            self._leases[lease.session_id] = Lease(lease.session_id, "", held.generation, 0.0)
            self._claims[lease.session_id] = 0  # a clean release: it killed no worker

    async def acquit(self, lease: Lease) -> None:
        held = self._leases.get(lease.session_id)
        if held is not None and held.generation == lease.generation and held.owner:
            self._claims[lease.session_id] = 1

    async def current_lease(self, session_id: str) -> Lease | None:
        held = self._leases.get(session_id)
        if held is None or held.expires <= self._clock():
            return None
        return held

    async def put_blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self._blobs.setdefault(digest, bytes(data))
        return digest

    async def get_blob(self, digest: str) -> bytes | None:
        return self._blobs.get(digest)

    async def ready(self) -> None:
        digest = await self.put_blob(READY_BLOB)
        if await self.get_blob(digest) != READY_BLOB:
            raise StoreUnavailable("memory store: a blob written was not read back")

    async def check_integrity(self, *, whole: bool = True) -> None:
        return None  # nothing stored outlives the process, so nothing can be torn

    async def mark_runnable(self, session_id: str) -> None:
        self._wakeups[session_id] = self._wakeups.get(session_id, 0) + 1

    async def defer(self, session_id: str, seconds: float, reason: DeferReason) -> None:
        check_defer(seconds, reason)
        self._wakeups.setdefault(session_id, 1)  # no mark yet: marked now, at the back
        self._deferred[session_id] = (self._clock() + seconds, reason)

    async def queued(self, session_id: str) -> Queued | None:
        deferred = self._deferred.get(session_id)
        if deferred is None or deferred[0] <= self._clock():
            return None
        return Queued(session_id, deferred[0], deferred[1])

    def _free(self, now: float) -> Iterator[tuple[str, int, int, float]]:
        """Marked sessions no lease holds and no deferral keeps back, oldest mark first, as
        (session id, token, claims counted, when the lease ran out)."""
        for sid, token in self._wakeups.items():
            deferred = self._deferred.get(sid)
            if deferred is not None and deferred[0] > now:
                continue
            held = self._leases.get(sid)
            if held is None or held.expires <= now:
                expired = held.expires if held is not None else 0.0
                yield sid, token, self._claims.get(sid, 0), expired

    async def runnable(self, limit: int = 100) -> list[Wakeup]:
        free = itertools.islice(self._free(self._clock()), limit)
        return [Wakeup(sid, token) for sid, token, _, _ in free]

    async def claim_runnable(
        self, owner: str, ttl: float, limit: int = 1, *, alone: bool = True
    ) -> list[Claimed]:
        check_claim(ttl, limit)
        now = self._clock()
        free = list(self._free(now))
        suspects = sorted((f for f in free if f[2] >= SUSPECT_CLAIMS), key=lambda f: f[3])
        if alone and suspects:
            chosen = suspects[:1]  # only to a worker running nothing else, and by itself
        else:
            # Takeovers first, oldest expiry first (a stable sort keeps mark order after).
            rest = sorted(
                (f for f in free if f[2] < SUSPECT_CLAIMS),
                key=lambda f: (0, f[3]) if f[2] > 0 else (1, 0.0),
            )
            chosen = rest[:limit]
        out: list[Claimed] = []
        for sid, token, _, _ in chosen:
            lease = self._take(sid, owner, now + ttl)
            out.append(Claimed(Wakeup(sid, token), lease, self._claims[sid]))
        return out

    async def clear_runnable(self, wakeup: Wakeup) -> bool:
        if self._wakeups.get(wakeup.session_id) != wakeup.token:
            return False
        del self._wakeups[wakeup.session_id]
        self._deferred.pop(wakeup.session_id, None)
        return True

    async def close(self) -> None:
        return None
