"""One writer's handle on one session: appends payloads as numbered events and keeps the
incremental fold current, so no step re-reads the log.

Owns event numbering, ids, timestamps and the observers of appended events. The store
decides what is durable; the `Folder` decides what it means.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Callable
from typing import Protocol

from tether.errors import Conflict
from tether.events import Event, Payload, format_time
from tether.fold import Folder
from tether.store.base import Lease, Store


class Clock(Protocol):
    def time(self) -> float: ...
    def monotonic(self) -> float: ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


# Event ids: a random per-process prefix and a counter, unique without a syscall per event.
_ID_PREFIX = secrets.token_hex(6)
_ID_COUNTER = itertools.count(1)


def new_event_id() -> str:
    return f"ev_{_ID_PREFIX}_{next(_ID_COUNTER):x}"


def new_session_id() -> str:
    return f"ses_{secrets.token_hex(8)}"


EventObserver = Callable[[Event], None]


class SessionLog:
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
        self.clock = clock or SystemClock()
        self.observers = observers
        # Set while this process runs the session as a worker: every append is fenced by it.
        self.lease: Lease | None = None
        # Parallel tool calls finish concurrently; appends to one session go one at a time.
        self._lock = asyncio.Lock()

    @classmethod
    async def load(
        cls,
        store: Store,
        session_id: str,
        *,
        clock: Clock | None = None,
        observers: tuple[EventObserver, ...] = (),
    ) -> SessionLog:
        folder = Folder().apply_all(await store.read(session_id))
        return cls(store, session_id, folder, clock=clock, observers=observers)

    async def append(self, *payloads: Payload, thread: str = "") -> list[Event]:
        """Append as one batch. A worker (holding `lease`) whose append meets events another
        process added meanwhile (a cancel, a decision, a message) folds them in and appends
        after them; a control-plane writer gets the `Conflict`, its fold caught up, to decide
        again. A lost lease is `LeaseLost`, and nothing is written."""
        async with self._lock:
            while True:
                base = self.folder.last_seq
                stamp = format_time(self.clock.time())
                events = [
                    Event(self.session_id, base + i, new_event_id(), stamp, payload, thread)
                    for i, payload in enumerate(payloads, start=1)
                ]
                try:
                    await self.store.append(self.session_id, events, base, self.lease)
                except Conflict:
                    await self._catch_up()
                    if self.lease is None:
                        raise
                    continue
                self._apply(events)
                return events

    async def append_shielded(self, *payloads: Payload) -> None:
        """For commits that must land even while the caller is being cancelled."""
        await asyncio.shield(self.append(*payloads))

    async def refresh(self) -> list[Event]:
        """Fold in whatever other processes appended since this log last looked."""
        async with self._lock:
            return await self._catch_up()

    async def _catch_up(self) -> list[Event]:
        events = await self.store.read(self.session_id, after_seq=self.folder.last_seq)
        self._apply(events)
        return events

    def _apply(self, events: list[Event]) -> None:
        for event in events:
            self.folder.apply(event)
            for observer in self.observers:
                observer(event)
