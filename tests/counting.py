"""A memory store that remembers what each read returned, for tests that hold a reader to
bounded reads (pages, news since a seq) rather than whole logs."""

from __future__ import annotations

from tether.events import Event
from tether.store import MemoryStore


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[int] = []  # how many events each read returned, in order

    @property
    def events_read(self) -> int:
        return sum(self.reads)

    async def read(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        events = await super().read(session_id, after_seq, limit)
        self.reads.append(len(events))
        return events
