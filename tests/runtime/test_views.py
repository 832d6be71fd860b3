"""The runtime's views fold a session the first time page by page, never the whole log at
once, and fold it exactly as a full fold does."""

from __future__ import annotations

from counting import CountingStore
from tether import snapshot
from tether.events import SessionCreated, UserMessage
from tether.fold import Folder, fold
from tether.messages import user
from tether.runtime.sessions import PAGE, Views
from tether.store.base import Snapshot
from tether.testing.store_conformance import make_events


async def test_a_long_session_is_folded_a_page_at_a_time() -> None:
    store = CountingStore()
    payloads = [SessionCreated(model="m"), *(UserMessage(user(f"m{i}")) for i in range(4 * PAGE))]
    await store.append("s", make_events("s", 1, payloads), 0)
    folder = await Views(store).get("s")
    assert max(store.reads) == PAGE and sum(store.reads) == 4 * PAGE + 1
    transcript, view = fold(await store.read("s"))
    assert folder.transcript() == transcript and folder.view() == view


async def test_views_hold_at_most_their_byte_budget_and_fold_a_dropped_one_again() -> None:
    store = CountingStore()
    for n in range(30):  # a 10 KB task each: 300 KB of transcripts
        task = UserMessage(user(f"{n}".ljust(10_000, "t")))
        await store.append(f"s{n}", make_events(f"s{n}", 1, [SessionCreated(model="m"), task]), 0)
    views = Views(store, size=1_000, budget=100_000)
    for n in range(30):
        await views.get(f"s{n}")
        assert views.bytes <= 100_000
    assert 0 < len(views) < 30
    assert views.known("s0") is None  # dropped first, as the least recently polled
    folder = await views.get("s0")
    transcript, view = fold(await store.read("s0"))
    assert folder.transcript() == transcript and folder.view() == view
    big = UserMessage(user("b" * 30_000))  # past a quarter of the budget: never kept
    await store.append("big", make_events("big", 1, [SessionCreated(model="m"), big]), 0)
    assert (await views.get("big")).last_seq == 2 and views.known("big") is None


async def test_a_session_first_polled_here_is_folded_from_its_snapshot_and_the_tail() -> None:
    store = CountingStore()
    payloads = [SessionCreated(model="m"), *(UserMessage(user(f"m{i}")) for i in range(50))]
    await store.append("s", make_events("s", 1, payloads), 0)
    at = Folder().apply_all(await store.read("s"))
    await store.put_snapshot(Snapshot("s", at.last_seq, snapshot.VERSION, snapshot.encode(at)))
    tail = [UserMessage(user("after"))]
    await store.append("s", make_events("s", at.last_seq + 1, tail), at.last_seq)
    store.reads.clear()
    views = Views(store)
    folder = await views.get("s")
    assert sum(store.reads) == 1  # the event after the snapshot, and nothing before it
    transcript, view = fold(await store.read("s"))
    assert folder.transcript() == transcript and folder.view() == view
    # Its idempotency keys before the snapshot are not known here: a keyed send reads the log.
    assert views.known("s") is None
