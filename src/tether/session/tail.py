"""One tail of the store per process: one loop that looks for news of the sessions its
followers follow, with one `last_seqs` query per round for all of them.

A follower (the `Watcher` of a `Runs`, the `EventHub` of a runtime) says which sessions it
follows and how often it wants them all looked at (`interval`); the tail runs a round when
the earliest follower is due, when this process appended (`poke`), or when the store pushes
news (PostgreSQL's NOTIFY), and hands each follower the last seqs of its own sessions. A
follower due soon after (within half the smallest interval) joins the round rather than
making one of its own, so followers of different intervals share rounds. With no followers
the tail has no task and asks nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Mapping
from typing import Protocol

from tether.errors import StoreError
from tether.store.base import News, Store

NEWS_SPAN = 60.0  # how long one wait for the store's pushed news lasts before it waits again


class Follower(Protocol):
    """What a follower of a `Tail` tells it, and is told."""

    @property
    def interval(self) -> float:
        """How often all its sessions are looked at, at the least."""
        ...

    def following(self) -> Collection[str]:
        """The sessions it follows now (a membership test is cheap)."""
        ...

    async def prepare(self) -> None:
        """At the start of each round where its interval has run (before the query)."""
        ...

    async def deliver(self, seqs: Mapping[str, int]) -> None:
        """The last seqs of those of its sessions this round looked at."""
        ...


class Tail:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.rounds = 0  # rounds that asked the store (one `last_seqs` each)
        self._followers: dict[Follower, float] = {}  # follower → when its full look is due
        self._poked: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None

    @property
    def followers(self) -> int:
        return len(self._followers)

    def follow(self, follower: Follower) -> None:
        """Look at the follower's sessions from now on: first after its interval (`poke` a
        session to have it looked at at once). Idempotent."""
        loop = asyncio.get_running_loop()
        if follower not in self._followers:
            self._followers[follower] = loop.time() + follower.interval
            self._wake.set()  # the loop may be waiting for a later due time
        if self._task is None or self._task.done():
            if self._task is not None and self._task.get_loop() is not loop:
                # A new event loop (`Agent.run_sync` again): an Event waited on in the old
                # one is bound to it, and would fail the new task's first wait.
                self._wake = asyncio.Event()
                self._wake.set()
            self._task = loop.create_task(self._run(), name="tether-tail")

    def unfollow(self, follower: Follower) -> None:
        self._followers.pop(follower, None)

    def poke(self, session_id: str) -> None:
        """This process appended to the session: look at it now, for every follower."""
        if self._followers:
            self._poked.add(session_id)
            self._wake.set()

    async def close(self) -> None:
        self._followers.clear()
        self._poked.clear()
        tasks = (self._task, self._listener)
        self._task = self._listener = None
        for task in tasks:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        # A store that pushes news wakes the tail at once for the sessions it names; the
        # intervals stay the fallback, so a lost notification only delays.
        news = self.store.subscribe()
        listener = None
        if news is not None:
            listener = loop.create_task(self._listen(news), name="tether-tail-news")
            self._listener = listener
        try:
            while self._followers:
                wait = min(self._followers.values()) - loop.time()
                if wait > 0 and not self._wake.is_set():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await self._wake.wait()
                self._wake.clear()
                try:
                    await self._round()
                except StoreError:
                    continue  # a busy or briefly unreachable store: the next round looks again
        finally:
            # No await from the loop's last check to here: a `follow` meanwhile sees the task
            # done and starts another.
            if listener is not None:
                listener.cancel()

    async def _listen(self, news: News) -> None:
        try:
            while True:
                named = await news.wait(NEWS_SPAN)
                if named and self._followers:
                    self._poked |= named
                    self._wake.set()
        finally:
            news.close()

    async def _round(self) -> None:
        if not self._followers:
            return  # the last one left while the loop waited
        now = asyncio.get_running_loop().time()
        poked, self._poked = self._poked, set()
        slack = min(f.interval for f in self._followers) / 2
        asked: dict[Follower, list[str]] = {}
        for follower, due in list(self._followers.items()):
            if due - now <= slack:  # due, or nearly: a full look in this round
                self._followers[follower] = now + follower.interval
                await follower.prepare()
                asked[follower] = list(follower.following())
            elif poked:
                following = follower.following()
                named = [sid for sid in poked if sid in following]
                if named:
                    asked[follower] = named
        wanted = sorted({sid for sids in asked.values() for sid in sids})
        if not wanted:
            return
        self.rounds += 1
        seqs = await self.store.last_seqs(wanted)
        for follower, sids in asked.items():
            if follower not in self._followers:
                continue  # it stopped following during the round
            try:
                await follower.deliver({sid: seqs[sid] for sid in sids if sid in seqs})
            except StoreError:
                continue  # its next round reads again; the others still get theirs
