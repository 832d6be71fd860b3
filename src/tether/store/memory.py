"""An in-process event store for tests and benchmarks: events kept as objects, never encoded."""

from __future__ import annotations

from collections.abc import Sequence

from tether.errors import Conflict
from tether.events import Event
from tether.store.base import SessionInfo, check_batch, is_retry


class MemoryStore:
    url = "memory:"

    def __init__(self) -> None:
        self._logs: dict[str, list[Event]] = {}

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> None:
        check_batch(session_id, events, expected_seq)
        log = self._logs.setdefault(session_id, [])
        if len(log) != expected_seq:
            stored = [e.id for e in log[expected_seq : expected_seq + len(events)]]
            if is_retry(stored, [e.id for e in events]):
                return
            raise Conflict(session_id, expected_seq, len(log))
        log.extend(events)

    async def read(self, session_id: str, after_seq: int = 0) -> list[Event]:
        return list(self._logs.get(session_id, ())[after_seq:])

    async def last_seq(self, session_id: str) -> int:
        return len(self._logs.get(session_id, ()))

    async def sessions(self, limit: int = 100) -> list[SessionInfo]:
        infos = [
            SessionInfo(sid, len(log), log[0].time, log[-1].time)
            for sid, log in self._logs.items()
            if log
        ]
        infos.sort(key=lambda i: i.updated, reverse=True)
        return infos[:limit]

    async def close(self) -> None:
        return None
