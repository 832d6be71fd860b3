"""One writer's handle on one session: appends payloads as numbered events and keeps the
incremental fold current, so no step re-reads the log.

Owns event numbering, ids, timestamps and the observers of appended events. The store
decides what is durable; the `Folder` decides what it means.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from tether import eager
from tether.errors import Conflict, StoreError
from tether.events import Event, Payload, format_time
from tether.fold import Folder
from tether.session import blips
from tether.store import catalog
from tether.store.base import Lease, Store
from tether.telemetry.live import observers as live_spans
from tether.telemetry.logs import note as note_log


class Clock(Protocol):
    def time(self) -> float: ...
    def monotonic(self) -> float: ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()

_log = logging.getLogger("tether.store")

# Event ids: a random per-process prefix and a counter, unique without a syscall per event.
_ID_PREFIX = secrets.token_hex(6)
_ID_COUNTER = itertools.count(1)


def new_event_id() -> str:
    return f"ev_{_ID_PREFIX}_{next(_ID_COUNTER):x}"


def new_session_id() -> str:
    return f"ses_{secrets.token_hex(8)}"


EventObserver = Callable[[Event], None]


class Turnstile:
    """One holder at a time, handed to waiters in arrival order. An `asyncio.Lock` with a
    synchronous way in: appends take it three times a step, and the lock's coroutine
    protocol cost more than an in-memory append itself."""

    __slots__ = ("_held", "_waiters")

    def __init__(self) -> None:
        self._held = False
        # Made when somebody first waits: most logs never have a waiter.
        self._waiters: collections.deque[asyncio.Future[None]] | None = None

    def enter(self) -> bool:
        """Take it if it is free; False: `await wait()` for it."""
        if self._held:
            return False
        self._held = True
        return True

    async def wait(self) -> None:
        """Return holding it. `leave()` hands it over still held, so nobody slips in."""
        waiter = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = collections.deque()
        waiters = self._waiters
        waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.leave()  # handed over as the cancel came: pass it on
            elif waiter in waiters:
                waiters.remove(waiter)
            raise

    def leave(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._held = False


class SessionLog:
    """The log of a session as its main thread folds it; `branch` gives the same log as a
    sub-agent's thread folds it. A branch appends on its thread through the session's log
    (one numbering, one lease, one turnstile), and every event appended or read is folded
    into the main fold and every open branch's."""

    def __init__(
        self,
        store: Store,
        session_id: str,
        folder: Folder | None = None,
        *,
        clock: Clock | None = None,
        observers: tuple[EventObserver, ...] = (),
    ) -> None:
        self.store = store
        self.session_id = session_id
        self.folder = folder or Folder()
        self.thread = self.folder.thread
        self.clock = clock or SYSTEM_CLOCK
        self.observers = observers
        # Set while this process runs the session as a worker: every append is fenced by it.
        self.lease: Lease | None = None
        # Parallel tool calls finish concurrently; appends to one session go one at a time.
        self._turns = Turnstile()
        self.root = self
        self._branches: dict[str, SessionLog] = {}  # open sub-agent threads (on the root)
        # Events folded but not committed yet (`hold`): the next commit carries them first.
        self._held: list[Event] = []
        # The fold holds events a failed commit never stored: rebuilt from the store first.
        self._stale = False
        # The seq up to which the fold's events are stored and observers have heard of them:
        # a batch is folded before its commit (its catalog row goes with it), so the fold
        # runs ahead of the store while a commit is under way.
        self._committed = self.folder.last_seq
        # What the catalog row takes from the session's metadata, worked out once.
        self._origin: tuple[object, catalog.Origin] | None = None

    @classmethod
    async def load(
        cls,
        store: Store,
        session_id: str,
        *,
        clock: Clock | None = None,
        observers: tuple[EventObserver, ...] = (),
    ) -> SessionLog:
        events = await store.read(session_id)
        folder = Folder().apply_all(events)
        # Spans go on from this history when a tracer provider is set; else nothing is added.
        observers = observers + live_spans(events)
        return cls(store, session_id, folder, clock=clock, observers=observers)

    def branch(self, folder: Folder) -> SessionLog:
        """The log as `folder`'s thread folds it, kept current from here on until `close`d:
        for a new thread, an empty fold opened before its first append; else one read with
        `load_branch`."""
        root = self.root
        log = SessionLog(root.store, root.session_id, folder, clock=root.clock)
        log.root = root
        root._branches[folder.thread] = log
        return log

    async def load_branch(self, thread: str) -> SessionLog:
        """The log as `thread` folds it, read from the store (a thread begun by an earlier
        run, taken on after a crash, a hand-over or an approval)."""
        open_now = self.root._branches.get(thread)
        if open_now is not None:
            return open_now
        # Folded, then opened, with no await between: an event appended meanwhile is of
        # another thread (nothing runs this one), so the fold misses nothing of its own.
        folder = Folder(thread).apply_all(await self.store.read(self.session_id))
        return self.branch(folder)

    def close(self) -> None:
        """Stop keeping a branch's fold current (its thread's run is over here)."""
        if self.root is not self:
            self.root._branches.pop(self.thread, None)

    async def append(
        self,
        *payloads: Payload,
        ids: Sequence[str] | None = None,
        threads: Sequence[str] | None = None,
        thread: str | None = None,
        admit: catalog.Admit | None = None,
    ) -> list[Event]:
        """Append as one batch. A worker (holding `lease`) whose append meets events another
        process added meanwhile (a cancel, a decision, a message) folds them in and appends
        after them; a control-plane writer gets the `Conflict`, its fold caught up, to decide
        again. A lost lease is `LeaseLost`, and nothing is written. `ids`: the events' ids,
        one per payload, when the caller names them (an idempotency key); else new ones.
        `threads`: the thread of each payload, for a batch that opens sub-agent threads;
        else all are `thread`'s, by default this log's thread's. `admit`: the tenant's quota of
        running sessions, checked by the store in the commit's transaction (`QuotaExceeded`)."""
        if self.root is not self:
            return await self.root.append(
                *payloads, ids=ids, threads=threads, thread=thread or self.thread, admit=admit
            )
        if not self._turns.enter():
            await self._turns.wait()
        try:
            if self._stale:
                await self._rebuild()
            if not payloads and not self._held:
                return []  # a `flush` that found nothing left to commit
            while True:
                base = self.folder.last_seq
                stamp = format_time(self.clock.time())
                sid = self.session_id
                if threads is None:
                    one = self.thread if thread is None else thread
                    events = [
                        Event(sid, base + i, new_event_id(), stamp, payload, one)
                        for i, payload in enumerate(payloads, start=1)
                    ]
                else:
                    events = [
                        Event(sid, base + i, new_event_id(), stamp, payload, thread)
                        for i, (payload, thread) in enumerate(
                            zip(payloads, threads, strict=True), start=1
                        )
                    ]
                if ids is not None:
                    events = [replace(e, id=i) for e, i in zip(events, ids, strict=True)]
                held = self._held
                # Folded first: the catalog row committed with the batch is the fold's after it.
                self._fold(events)
                batch = held + events if held else events
                try:
                    if held:  # a tool's result is in it: it lands even if the caller is cancelled
                        commit = eager.start(self._commit(batch, self._committed, admit))
                        if isinstance(commit, eager.Suspended):
                            await blips.shielded(commit.rest(), f"session {sid}: a commit")
                    else:
                        await self._commit(batch, self._committed, admit)
                except Conflict:
                    # Another process appended first: the fold is made again from the store,
                    # the held events folded after its events, still held.
                    await self._rehold()
                    if self.lease is None:
                        raise
                    continue
                except BaseException:
                    # Failed for good (a lost lease, a store that stays down, a cancel, a
                    # refused admission): the batch and the held events are gone, and the fold
                    # that has them is rebuilt before this log is used again.
                    self._stale = True
                    raise
                self._held = []
                self._committed = batch[-1].seq
                self._observe(batch)
                note_log(self, batch[-1].thread)  # for the task's log records
                return events
        finally:
            self._turns.leave()

    def _row(self) -> catalog.CatalogRow | None:
        """The catalog row of the fold as it stands (None from a log whose root folds a
        sub-agent's thread: the store then folds the session itself)."""
        folder = self.folder
        if folder.thread:
            return None
        meta = folder.metadata
        if self._origin is None or self._origin[0] is not meta:
            self._origin = (meta, catalog.origin_of(meta))
        return catalog.row_of(folder, self._origin[1])

    async def _commit(
        self, events: list[Event], base: int, admit: catalog.Admit | None = None
    ) -> None:
        """One batch to the store. Under a lease, a transient failure (the store restarting,
        a dropped connection) is tried again, the same events with the same ids, for as long
        as the lease lasts: a try whose commit landed though its answer was lost is accepted
        once by the store. A refusal (a conflict, a lost lease) is never retried. Each
        distinct failure is logged once, not each try."""
        delay = blips.FIRST_DELAY
        said = None
        row = self._row()
        while True:
            try:
                await self.store.append(
                    self.session_id, events, base, self.lease, row=row, admit=admit
                )
                return
            except StoreError as exc:
                lease = self.lease  # renewed meanwhile by the watcher, while it could
                if lease is None or not blips.transient(exc) or not blips.lasts(lease, delay):
                    raise
                if str(exc) != said:
                    said = str(exc)
                    _log.warning(
                        "session %s: a commit of %d events failed (%s); trying again while "
                        "its lease lasts",
                        self.session_id,
                        len(events),
                        exc,
                    )
            await asyncio.sleep(delay)
            delay = blips.backoff(delay)

    async def append_shielded(self, *payloads: Payload) -> None:
        """For commits that must land even while the caller is being cancelled. This is
        `eager.shielded` written out: one coroutine less on every tool result. A failure
        after the caller was cancelled is logged, never left unretrieved."""
        started = eager.start(self.append(*payloads))
        if isinstance(started, eager.Suspended):
            await blips.shielded(started.rest(), f"session {self.session_id}: a commit")

    def hold(self, payload: Payload) -> bool:
        """Fold `payload` now and commit it with this log's next append, in one batch (a
        step's last tool result rides with the next `model.requested`: one commit less per
        step). The caller goes on to that append with no wait between, so the result is
        durable as it would have been but for the CPU time of building the next request;
        `refresh` and `flush` commit it too. Observers see it once committed. False, and
        nothing done, when it cannot be held: the caller appends it itself. Only a runner
        under a lease with no sub-agent thread open holds (their folds would need it)."""
        if (
            self.root is not self
            or self.lease is None
            or self._branches
            or self._stale
            or not self._turns.enter()
        ):
            return False
        try:
            self._fold_held(payload)
        finally:
            self._turns.leave()
        return True

    @property
    def held(self) -> bool:
        return bool(self.root._held)

    async def flush(self) -> None:
        """Commit what `hold` holds, alone."""
        if self.held:
            await self.append()

    async def refresh(self) -> list[Event]:
        """Fold in whatever other processes appended since this log last looked (committing
        first what this log holds)."""
        if self.root is not self:
            return await self.root.refresh()
        if self._held:
            await self.append()
        if not self._turns.enter():
            await self._turns.wait()
        try:
            if self._stale:
                return await self._rebuild()
            return await self._catch_up()
        finally:
            self._turns.leave()

    async def _catch_up(self) -> list[Event]:
        events = await self.store.read(self.session_id, after_seq=self.folder.last_seq)
        self._fold(events)
        if events:
            self._committed = events[-1].seq
        self._observe(events)
        return events

    async def _rebuild(self) -> list[Event]:
        """Fold the log again from the store, in place (whoever holds this folder, or a
        branch's, sees the new one), after a commit failed: the fold had its events, the
        store has not. Observers are told of the events they have not heard of."""
        committed = self._committed
        events = await self.store.read(self.session_id)
        for folder in (self.folder, *(b.folder for b in self._branches.values())):
            fresh = Folder(folder.thread).apply_all(events)
            vars(folder).clear()
            vars(folder).update(vars(fresh))
        self._held = []
        self._stale = False
        self._committed = self.folder.last_seq
        news = [e for e in events if e.seq > committed]
        self._observe(news)
        return news

    async def _rehold(self) -> None:
        """Another process appended first: fold its events, then the held ones after them,
        still held (the append that met the conflict tries again with them)."""
        held = [e.payload for e in self._held]
        self._stale = True
        await self._rebuild()
        for payload in held:
            self._fold_held(payload)

    def _fold_held(self, payload: Payload) -> None:
        """Fold `payload` as this log's next event, held for the next commit."""
        event = Event(
            self.session_id,
            self.folder.last_seq + 1,
            new_event_id(),
            format_time(self.clock.time()),
            payload,
            self.thread,
        )
        self.folder.apply(event)
        self._held.append(event)

    def _observe(self, events: list[Event]) -> None:
        for event in events:
            for observer in self.observers:
                observer(event)

    def _fold(self, events: list[Event]) -> None:
        """Fold events into this log's fold and every open branch's."""
        branches = self._branches
        for event in events:
            self.folder.apply(event)
            if branches:  # a fold changes no branch: no copy of the dict needed
                for branch in branches.values():
                    branch.folder.apply(event)
