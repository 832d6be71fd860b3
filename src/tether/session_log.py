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

from tether.events import Event, Payload, format_time
from tether.fold import Folder
from tether.store.base import Store


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
        async with self._lock:
            base = self.folder.last_seq
            stamp = format_time(self.clock.time())
            events = [
                Event(self.session_id, base + i, new_event_id(), stamp, payload, thread)
                for i, payload in enumerate(payloads, start=1)
            ]
            await self.store.append(self.session_id, events, base)
            for event in events:
                self.folder.apply(event)
                for observer in self.observers:
                    observer(event)
            return events

    async def append_shielded(self, *payloads: Payload) -> None:
        """For commits that must land even while the caller is being cancelled."""
        await asyncio.shield(self.append(*payloads))
