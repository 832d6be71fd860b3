"""Keeping the sessions this process runs honest: renewing their leases, and noticing what
other processes append to them (a cancel, an interrupt, a decision).

A `Watcher` is a follower of its process's `Tail` (`session/tail.py`), which looks for news
of all running sessions with one query per round, for the watcher and whoever else follows
the store (the event hub), so a thousand running sessions cost one query per interval, not
a thousand. The watcher owns the renewals, and no loop logic: it folds the news in and
calls back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from tether.errors import LeaseLost, StoreError, UsageError
from tether.session.log import SessionLog
from tether.session.tail import Tail
from tether.store.base import Store

log = logging.getLogger("tether.worker")


@dataclass
class Watched:
    log: SessionLog
    ttl: float
    on_news: Callable[[], None]
    on_lease_lost: Callable[[], None]
    failing: str | None = None  # the renewal's failure, said once until it changes or ends


class Watcher:
    """`interval`: how often to look for other processes' appends (a cancel is noticed
    within it). A lease is renewed once a third of its ttl has run, so two renewals can fail
    before it lapses. `tail`: the process's tail of `store`, shared with other followers
    (None: the watcher makes its own, and closes it)."""

    def __init__(self, store: Store, interval: float = 0.5, *, tail: Tail | None = None) -> None:
        if tail is not None and tail.store is not store:
            raise UsageError("a watcher's tail must follow the watcher's own store")
        self.store = store
        self.interval = interval
        self.tail = tail if tail is not None else Tail(store)
        self._owns_tail = tail is None
        self._watched: dict[str, Watched] = {}

    def watch(self, watched: Watched) -> None:
        self._watched[watched.log.session_id] = watched
        self.tail.follow(self)

    def unwatch(self, session_id: str) -> None:
        self._watched.pop(session_id, None)
        if not self._watched:
            self.tail.unfollow(self)

    async def close(self) -> None:
        self.tail.unfollow(self)
        if self._owns_tail:
            await self.tail.close()

    # What the tail asks of a follower.

    def following(self) -> Collection[str]:
        return self._watched.keys()

    async def prepare(self) -> None:
        """Renew what is due, before the tail looks for news. All due leases are renewed at
        once: a store that groups its writes (SQLite) commits them together, where one at
        a time, 10,000 sessions' renewals took longer than their leases last."""
        now = time.time()
        due = [
            (sid, w)
            for sid, w in self._watched.items()
            if w.log.lease is not None and w.log.lease.expires - now < w.ttl * 2 / 3
        ]
        if due:
            await asyncio.gather(*(self._renew(sid, w) for sid, w in due))

    async def _renew(self, sid: str, w: Watched) -> None:
        lease = w.log.lease
        if lease is None:
            return
        try:
            renewed = await self.store.renew(lease, w.ttl)
        except LeaseLost:
            self._watched.pop(sid, None)
            w.on_lease_lost()
        except StoreError as exc:
            # A blip: the next round tries again, and the other leases are renewed.
            if str(exc) != w.failing:
                w.failing = str(exc)
                log.warning("session %s: renewing its lease failed: %s", sid, exc)
        else:
            w.failing = None
            if w.log.lease is lease:  # not released or replaced while the renewal ran
                w.log.lease = renewed

    async def deliver(self, seqs: Mapping[str, int]) -> None:
        """Fold in other processes' appends, and call back."""
        for sid, seq in seqs.items():
            news = self._watched.get(sid)
            if news is not None and seq > news.log.folder.last_seq:
                await news.log.refresh()
                news.on_news()
