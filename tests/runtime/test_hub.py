"""Event streams read the log in bounded pages: however long the log, a stream holds at most
a page of it (and its subscriber's buffer), and still delivers every event once, in order."""

from __future__ import annotations

import asyncio

from counting import CountingStore
from tether.events import Event, SessionEnded, UserMessage
from tether.messages import user
from tether.runtime.hub import BUFFER, PAGE, EventHub, stream_events
from tether.store import MemoryStore
from tether.testing.store_conformance import make_events


async def _fill(store: MemoryStore, count: int, first: int = 1, *, end: bool = False) -> None:
    seq = first - 1
    while seq < first - 1 + count:
        n = min(1_000, first - 1 + count - seq)
        payloads = [UserMessage(user(f"m{seq + i}")) for i in range(1, n + 1)]
        if end and seq + n == first - 1 + count:
            payloads[-1] = SessionEnded("done", None)
        await store.append("s", make_events("s", seq + 1, list(payloads)), seq)
        seq += n


async def _not_ended() -> tuple[bool, int]:
    return False, 0


async def test_a_stream_over_a_long_log_reads_it_page_by_page() -> None:
    store = CountingStore()
    count = 5 * PAGE + 37
    await _fill(store, count, end=True)
    hub = EventHub(store, interval=0.01)
    seqs = [e.seq async for e in stream_events(hub, "s", 0, _not_ended) if isinstance(e, Event)]
    await hub.close()
    assert seqs == list(range(1, count + 1))
    assert store.reads and max(store.reads) <= PAGE


async def test_a_stream_whose_reader_stops_has_read_one_page() -> None:
    store = CountingStore()
    await _fill(store, 20 * PAGE)
    hub = EventHub(store, interval=0.01)
    stream = stream_events(hub, "s", 10, _not_ended)
    first = [await anext(stream) for _ in range(3)]
    await asyncio.sleep(0.05)  # the hub ticks meanwhile; nothing reads ahead for the stream
    assert [e.seq for e in first if isinstance(e, Event)] == [11, 12, 13]
    assert sum(store.reads) <= PAGE
    await stream.aclose()
    await hub.close()


async def test_a_burst_larger_than_a_buffer_reaches_a_waiting_stream_in_pages() -> None:
    store = CountingStore()
    await _fill(store, 3)
    hub = EventHub(store, interval=0.01)
    got: list[int] = []
    caught_up = asyncio.Event()

    async def listen() -> None:
        async for event in stream_events(hub, "s", 0, _not_ended):
            assert isinstance(event, Event)
            got.append(event.seq)
            if event.seq == 3:
                caught_up.set()
            if event.seq == 3 + 3 * BUFFER:
                return

    listener = asyncio.create_task(listen())
    await asyncio.wait_for(caught_up.wait(), 10)
    await _fill(store, 3 * BUFFER, first=4)  # appended by "another process": no poke
    await asyncio.wait_for(listener, 10)
    await hub.close()
    assert got == list(range(1, 4 + 3 * BUFFER))
    assert max(store.reads) <= max(PAGE, BUFFER)
