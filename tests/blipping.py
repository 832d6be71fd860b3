"""A real store that blips on demand, for the tests of surviving a store's blips."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.errors import StoreError
from tether.events import Event
from tether.store.base import Lease, Store


class Blipping:
    """A real store whose next `fail_appends` appends fail as a dropped connection does:
    with `land`, after the batch was committed (its answer lost); and whose releases fail
    while `fail_releases` is set."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.fail_appends = 0
        self.land = False
        self.fail_releases = False
        self.appends_tried = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def append(
        self,
        session_id: str,
        events: Sequence[Event],
        expected_seq: int,
        lease: Lease | None = None,
        **catalog: Any,  # the row and the admission, passed on as they came
    ) -> None:
        self.appends_tried += 1
        if self.fail_appends > 0:
            self.fail_appends -= 1
            if self.land:
                await self.store.append(session_id, events, expected_seq, lease, **catalog)
            raise StoreError("store: the connection was lost")
        await self.store.append(session_id, events, expected_seq, lease, **catalog)

    async def release(self, lease: Lease) -> None:
        if self.fail_releases:
            raise StoreError("store: the connection was lost")
        await self.store.release(lease)
