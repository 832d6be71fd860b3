"""Live event streams: the process's one tail over the store, fanned out to every subscriber.

Owns `EventHub` and `stream_events`, the generator behind `Runtime.events`: the log so far,
then live, each event once and in order. The hub follows the process's `Tail`, which looks
for news with one `last_seqs` query per round for all watched sessions, the running ones
included (each interval, or at once when this process appended: `poke`); the hub reads each
session's news once, and hands the same events to all its subscribers. A subscriber
that falls behind or sees a gap reads the store itself, so the hub may drop, never reorder.
A model's streamed output (deltas) comes straight from this process's workers; each delta is
tagged with the last event its session committed here before it (`committed`), and a stream
yields it only after that event, so a reader sees a call's output after the event that
opened it (its `model.requested`, or a retry's `model.failed`), never before. Every read is
bounded: a stream holds at most a page of the log and its subscriber's buffer, however long
the log and however slowly its client reads.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field

from tether.errors import StoreError, UsageError
from tether.events import Event, SessionEnded
from tether.providers.base import Delta
from tether.session.tail import Tail
from tether.store.base import Store

PAGE = 500  # events a stream reads from the store at once
BUFFER = 1_000  # events a subscriber may have waiting before it must read the store itself


@dataclass(eq=False)
class Subscription:
    """`stale`: the subscriber must read the store itself (it fell behind, or the hub began
    watching the session after it read). `deltas`: None when it does not want them; each
    with the seq of the event it follows."""

    session_id: str
    notify: asyncio.Event = field(default_factory=asyncio.Event)
    buffer: list[Event] = field(default_factory=list)
    stale: bool = False
    closed: bool = False
    deltas: list[tuple[int, Delta]] | None = None

    def take(self) -> tuple[list[Event], bool, list[tuple[int, Delta]]]:
        events, stale, deltas = self.buffer, self.stale, self.deltas
        self.buffer, self.stale = [], False
        if deltas:
            self.deltas = []
        self.notify.clear()
        return events, stale, deltas or []


class EventHub:
    """A follower of the process's `Tail` (`session/tail.py`): every `interval`, or at once
    when this process appended (`poke`) or the store pushed news, the tail asks the last seqs
    of the subscribed sessions (with the running ones, in the same query), and the hub reads
    each session's news once for all its subscribers. `tail`: shared with the process's
    worker (None: the hub makes its own, and closes it)."""

    def __init__(self, store: Store, interval: float = 0.1, *, tail: Tail | None = None) -> None:
        if tail is not None and tail.store is not store:
            raise UsageError("an event hub's tail must follow the hub's own store")
        self.store = store
        self.interval = interval
        self.tail = tail if tail is not None else Tail(store)
        self._owns_tail = tail is None
        self._subs: dict[str, set[Subscription]] = {}
        self._cursor: dict[str, int] = {}
        # The last seq this process committed, by watched session: what its deltas follow.
        self._committed: dict[str, int] = {}

    @property
    def subscribers(self) -> int:
        return sum(len(s) for s in self._subs.values())

    def subscribe(self, session_id: str, *, deltas: bool = False) -> Subscription:
        sub = Subscription(session_id, deltas=[] if deltas else None)
        new = session_id not in self._subs
        self._subs.setdefault(session_id, set()).add(sub)
        self.tail.follow(self)
        if new:
            self.tail.poke(session_id)  # look now, not at the next interval
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.session_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.session_id]
                self._cursor.pop(sub.session_id, None)
                self._committed.pop(sub.session_id, None)
                if not self._subs:
                    self.tail.unfollow(self)

    def publish_delta(self, session_id: str, delta: Delta) -> None:
        """A piece of a model's streamed answer in this process: to the session's subscribers
        that want them, now, after the last event this process committed for it. Never
        stored, never replayed; one that falls behind loses them."""
        subs = self._subs.get(session_id)
        if not subs:
            return
        after = self._committed.get(session_id, 0)
        for sub in subs:
            if sub.deltas is not None and len(sub.deltas) < BUFFER:
                sub.deltas.append((after, delta))
                sub.notify.set()

    def committed(self, event: Event) -> None:
        """An event this process appended (its workers' observer): the session's next deltas
        follow it, and its news is looked for now."""
        if event.session_id in self._subs:
            self._committed[event.session_id] = event.seq
            self.tail.poke(event.session_id)

    def poke(self, session_id: str) -> None:
        """This process appended to the session: look now rather than at the next interval."""
        if session_id in self._subs:
            self.tail.poke(session_id)

    async def close(self) -> None:
        self.tail.unfollow(self)
        if self._owns_tail:
            await self.tail.close()
        for subs in self._subs.values():
            for sub in subs:
                sub.closed = True
                sub.notify.set()

    # What the tail asks of a follower.

    def following(self) -> Collection[str]:
        return self._subs.keys()

    async def prepare(self) -> None:
        pass

    async def deliver(self, seqs: Mapping[str, int]) -> None:
        """Read each session's news once and hand it to its subscribers."""
        for sid, seq in seqs.items():
            if sid not in self._subs:
                continue
            cursor = self._cursor.get(sid)
            if cursor is None:  # new to the hub: its subscribers read what came before
                self._cursor[sid] = cursor = seq
                self._notify(sid, [], stale=True)
            if seq - cursor > BUFFER:
                # More news than a subscriber may hold: each reads the store itself, in pages.
                self._cursor[sid] = seq
                self._notify(sid, [], stale=True)
            elif seq > cursor:
                events = await self.store.read(sid, cursor, limit=seq - cursor)
                if events:
                    self._cursor[sid] = events[-1].seq
                    self._notify(sid, events)

    def _notify(self, session_id: str, events: list[Event], *, stale: bool = False) -> None:
        for sub in self._subs.get(session_id, ()):
            if stale or len(sub.buffer) + len(events) > BUFFER:
                sub.buffer, sub.stale = [], True
            else:
                sub.buffer.extend(events)
            sub.notify.set()


async def stream_events(
    hub: EventHub,
    session_id: str,
    after_seq: int,
    is_terminal: Callable[[], Awaitable[tuple[bool, int]]],
    *,
    deltas: bool = False,
) -> AsyncGenerator[Event | Delta, None]:
    """Every event after `after_seq`, once and in order, then live ones as they land; ends
    after `session.ended`, or when `is_terminal()` says (terminal, last seq) that the session
    ended and everything is delivered. With `deltas`, also the model's streamed output as
    this process's workers produce it, each after the event it follows (a delta whose event
    is not yielded yet waits for it; past `BUFFER` waiting, the oldest are dropped)."""
    store = hub.store
    cursor = after_seq
    waiting: deque[tuple[int, Delta]] = deque()
    # First, so nothing appended while reading is missed.
    sub = hub.subscribe(session_id, deltas=deltas)
    try:
        pending = await store.read(session_id, cursor, limit=PAGE)
        paging = len(pending) == PAGE  # a full page: the store may hold more after it
        checked = False
        while True:
            for event in pending:
                if event.seq != cursor + 1:
                    continue  # already delivered, or a gap the next read fills
                cursor = event.seq
                yield event
                if isinstance(event.payload, SessionEnded):
                    return
                while waiting and waiting[0][0] <= cursor:
                    yield waiting.popleft()[1]
            if paging:
                pending = await store.read(session_id, cursor, limit=PAGE)
                paging = len(pending) == PAGE
                continue
            if not checked:  # once: a stream opened after the end has no session.ended to see
                checked = True
                ended, last_seq = await is_terminal()
                if ended and cursor >= last_seq:
                    return
            await sub.notify.wait()
            if sub.closed:
                raise StoreError("the runtime was closed while streaming events")
            news, stale, streamed = sub.take()
            waiting.extend(streamed)
            while len(waiting) > BUFFER:
                waiting.popleft()
            while waiting and waiting[0][0] <= cursor:
                yield waiting.popleft()[1]
            if stale or (news and news[0].seq > cursor + 1):
                # Behind, or a gap: the store has what the hub did not bring.
                pending = await store.read(session_id, cursor, limit=PAGE)
                paging = len(pending) == PAGE
            else:
                pending = news
    finally:
        hub.unsubscribe(sub)
