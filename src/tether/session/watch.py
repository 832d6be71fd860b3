"""Keeping the sessions this process runs honest: renewing their leases, and noticing what
other processes append to them (a cancel, an interrupt, a decision).

One `Watcher` per store and process polls for all its running sessions at once, so a
thousand running sessions cost one query per interval, not a thousand. It owns no loop
logic: it folds the news in and calls back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from tether.errors import LeaseLost, StoreError
from tether.session.log import SessionLog
from tether.store.base import Store


@dataclass
class Watched:
    log: SessionLog
    ttl: float
    on_news: Callable[[], None]
    on_lease_lost: Callable[[], None]


class Watcher:
    """`interval`: how often to look for other processes' appends (a cancel is noticed
    within it). A lease is renewed once a third of its ttl has run, so two renewals can fail
    before it lapses."""

    def __init__(self, store: Store, interval: float = 0.5) -> None:
        self.store = store
        self.interval = interval
        self._watched: dict[str, Watched] = {}
        self._task: asyncio.Task[None] | None = None

    def watch(self, watched: Watched) -> None:
        self._watched[watched.log.session_id] = watched
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="tether-watcher")

    def unwatch(self, session_id: str) -> None:
        self._watched.pop(session_id, None)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        # A store that pushes news (PostgreSQL's NOTIFY) wakes the watcher at once; the
        # interval stays the fallback, so a lost notification only delays.
        news = self.store.subscribe()
        try:
            while self._watched:
                if news is not None:
                    await news.wait(self.interval)
                else:
                    await asyncio.sleep(self.interval)
                try:
                    await self.tick()
                except StoreError:
                    continue  # a busy or briefly unreachable store: the next tick tries again
        finally:
            if news is not None:
                news.close()

    async def tick(self) -> None:
        """One round: renew what is due, then fold in other processes' appends."""
        now = time.time()
        for sid, w in list(self._watched.items()):
            lease = w.log.lease
            if lease is not None and lease.expires - now < w.ttl * 2 / 3:
                try:
                    w.log.lease = await self.store.renew(lease, w.ttl)
                except LeaseLost:
                    self._watched.pop(sid, None)
                    w.on_lease_lost()
        if not self._watched:
            return
        seqs = await self.store.last_seqs(list(self._watched))
        for sid, seq in seqs.items():
            news = self._watched.get(sid)
            if news is not None and seq > news.log.folder.last_seq:
                await news.log.refresh()
                news.on_news()
