"""One tail of the store per process: the worker's runs (lease renewals, cancels from other
processes) and the event hub's streams follow the same `Tail`, which asks `last_seqs` once
per round for all of them, and asks nothing when nobody follows."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence

from counting import CountingStore
from tether.runtime import LocalRuntime
from tether.runtime.hub import EventHub
from tether.session.tail import Tail
from tether.testing.runtime_conformance import Observer, spec


class SeqCountingStore(CountingStore):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[list[str]] = []  # the sessions of each `last_seqs`, in order

    async def last_seqs(self, session_ids: Sequence[str]) -> dict[str, int]:
        self.asked.append(list(session_ids))
        return await super().last_seqs(session_ids)


class Follower:
    def __init__(self, interval: float, sessions: set[str]) -> None:
        self.interval = interval
        self.sessions = sessions
        self.prepared = 0
        self.delivered: list[dict[str, int]] = []

    def following(self) -> Collection[str]:
        return self.sessions

    async def prepare(self) -> None:
        self.prepared += 1

    async def deliver(self, seqs: Mapping[str, int]) -> None:
        self.delivered.append(dict(seqs))


async def test_a_runtime_running_a_session_with_a_stream_open_asks_once_per_round() -> None:
    store = SeqCountingStore()
    # Before the shared tail: the hub asked every 0.05 s and the watcher every 0.1 s, about
    # 30 queries a second; now one round every 0.05 s, the watcher's in every other one.
    async with LocalRuntime(store, workers=2, poll_interval=0.05, watch_interval=0.1) as rt:
        ref = await rt.start(spec("hang"))
        await Observer(rt, ref).until("the model call", lambda s: s.state == "waiting_model")
        stream = rt.events(ref)

        async def drain() -> None:
            async for _ in stream:
                pass

        reader = asyncio.create_task(drain())
        tail = rt.hub.tail
        for _ in range(200):  # the stream has subscribed
            if rt.hub.subscribers:
                break
            await asyncio.sleep(0.01)
        assert tail.followers == 2  # the worker's runs and the hub
        await asyncio.sleep(0.2)
        asked, rounds = len(store.asked), tail.rounds
        await asyncio.sleep(1.0)
        queries = len(store.asked) - asked
        assert queries == tail.rounds - rounds  # one `last_seqs` per round, nobody else asks
        assert 0 < queries <= 1.0 / 0.05 + 4, queries  # at the smaller interval, not the sum
        assert all(ids == [ref.session_id] for ids in store.asked[asked:])
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await rt.cancel(ref)


async def test_followers_of_different_intervals_share_rounds() -> None:
    store = SeqCountingStore()
    tail = Tail(store)
    fast, slow = Follower(0.05, {"a"}), Follower(0.1, {"b"})
    tail.follow(fast)
    tail.follow(slow)
    await asyncio.sleep(1.0)
    await tail.close()
    assert len(store.asked) == tail.rounds
    assert tail.rounds <= 1.0 / 0.05 + 2, tail.rounds
    assert all(set(ids) <= {"a", "b"} for ids in store.asked)
    assert ["a", "b"] in store.asked  # the slow one joins the fast one's rounds
    # Each is looked at at its own cadence, at the least.
    assert fast.prepared >= 8 and slow.prepared >= 4, (fast.prepared, slow.prepared)
    assert slow.prepared <= fast.prepared // 2 + 2, (fast.prepared, slow.prepared)
    assert all(d.keys() <= {"a"} for d in fast.delivered)
    assert all(d.keys() <= {"b"} for d in slow.delivered)


async def test_a_poke_looks_at_once_at_that_session_only() -> None:
    store = SeqCountingStore()
    tail = Tail(store)
    follower = Follower(60.0, {"a", "b"})
    tail.follow(follower)
    tail.poke("a")
    tail.poke("nobody")  # followed by none: not asked
    for _ in range(100):
        if follower.delivered:
            break
        await asyncio.sleep(0.01)
    await tail.close()
    assert store.asked == [["a"]]
    assert follower.prepared == 0  # its interval has not run: no full look yet


async def test_a_tail_nobody_follows_asks_nothing() -> None:
    store = SeqCountingStore()
    hub = EventHub(store, interval=0.01)
    sub = hub.subscribe("s")
    await asyncio.sleep(0.1)
    assert store.asked  # followed: it looks
    hub.unsubscribe(sub)
    assert hub.tail.followers == 0
    await asyncio.sleep(0.05)  # a round under way ends
    asked = len(store.asked)
    await asyncio.sleep(0.2)
    assert len(store.asked) == asked
    await hub.close()
