"""`claim_runnable` on one SQLite file shared by several stores (as by several processes): each
claim is one transaction under SQLite's write lock, so workers claiming at once get different
sessions, and a claim made through one store fences the lease another store remembers."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import tether.store.sqlite
import tether.store.sqlite_wakeups
from tether.errors import LeaseLost
from tether.events import UserMessage
from tether.messages import user
from tether.store import SQLiteStore
from tether.store.base import Claimed
from tether.testing.store_conformance import make_events


def claim_in_threads(path: Path, workers: int, limit: int) -> list[list[Claimed]]:
    """Each worker a thread with its own event loop and store on `path`, all claiming at once."""
    start = threading.Barrier(workers)
    results: list[list[Claimed]] = [[] for _ in range(workers)]
    errors: list[BaseException] = []

    def work(n: int) -> None:
        async def body() -> None:
            store = SQLiteStore(str(path))
            try:
                start.wait()
                results[n] = await store.claim_runnable(f"w{n}", ttl=30, limit=limit, alone=False)
            finally:
                await store.close()

        try:
            asyncio.run(body())
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


async def test_stores_on_one_file_claiming_at_once_get_disjoint_sessions(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SQLiteStore(str(path))
    names = [f"s{i:02}" for i in range(40)]
    for sid in names:
        await store.mark_runnable(sid)
    results = await asyncio.to_thread(claim_in_threads, path, 4, 15)
    taken = [c.lease.session_id for batch in results for c in batch]
    assert sorted(taken) == names, "a session was claimed twice or lost"
    for n, batch in enumerate(results):
        for c in batch:
            assert c.lease.owner == f"w{n}" and c.claims == 1
            assert await store.current_lease(c.lease.session_id) == c.lease
    assert await store.runnable() == []
    await store.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


async def test_a_claim_through_another_store_fences_the_lease_this_one_remembers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = SQLiteStore(str(tmp_path / "t.db")), SQLiteStore(str(tmp_path / "t.db"))
    clock = Clock()  # the store's clock, moved by hand so a lease expires without a sleep
    monkeypatch.setattr(tether.store.sqlite, "time", clock)
    monkeypatch.setattr(tether.store.sqlite_wakeups, "time", clock)
    try:
        await ours.mark_runnable("s")
        [mine] = await ours.claim_runnable("A", ttl=10, limit=1)
        first = make_events("s", 1, [UserMessage(user("a"))], tag="a")
        await ours.append("s", first, 0, lease=mine.lease)  # the store remembers this lease
        clock.now += 11  # A stalls past its lease
        [taken] = await theirs.claim_runnable("B", ttl=30, limit=1, alone=True)
        assert taken.claims == 2 and taken.lease.generation == mine.lease.generation + 1
        with pytest.raises(LeaseLost):
            await ours.append(
                "s", make_events("s", 2, [UserMessage(user("late"))], "a"), 1, mine.lease
            )
        await theirs.append("s", make_events("s", 2, [UserMessage(user("b"))], "b"), 1, taken.lease)
        assert [e.id for e in await ours.read("s")] == ["s-a-1", "s-b-2"]
    finally:
        await ours.close()
        await theirs.close()
