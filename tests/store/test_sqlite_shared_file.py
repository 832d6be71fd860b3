"""Two connections on one SQLite file: what a store remembers of a session (its last seq, its
lease) holds only until another connection commits, and what a rolled-back group taught it is
forgotten. Each test here fails if the store trusted its memory one commit too long; the last
two show that batches sharing one group transaction still see each other's writes and land
even when their caller is gone.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest

import tether.store.sqlite
from tether.errors import Conflict, LeaseHeld, LeaseLost, StoreError
from tether.events import Event, UserMessage
from tether.messages import user
from tether.store import SQLiteStore
from tether.testing.store_conformance import make_events


def batch(session_id: str, seq: int, tag: str) -> list[Event]:
    return make_events(session_id, seq, [UserMessage(user(tag))], tag=tag)


def ids(events: list[Event]) -> list[str]:
    return [e.id for e in events]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    ours = SQLiteStore(str(tmp_path / "t.db"))
    yield ours
    await ours.close()


@pytest.fixture
async def other_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    """A second store on the same file: another process, as far as SQLite can tell."""
    theirs = SQLiteStore(str(tmp_path / "t.db"))
    yield theirs
    await theirs.close()


class Clock:
    """The store's clock, moved by hand so a lease expires without the test sleeping."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(tether.store.sqlite, "time", fake)
    return fake


async def in_one_group(store: SQLiteStore, *calls: Awaitable[object]) -> list[object]:
    """Start `calls` as tasks in one loop turn, behind an opener: the first write of a quiet
    turn may commit at once and alone (group_commit.py), the rest share the next group.
    Returns what each call returned or raised."""
    opener = store.append("opener", batch("opener", 1, "o"), 0)
    outcomes = await asyncio.gather(opener, *calls, return_exceptions=True)
    return outcomes[1:]


async def test_an_append_by_another_store_is_seen_by_last_seq_and_read(
    store: SQLiteStore, other_store: SQLiteStore
) -> None:
    await store.append("s", batch("s", 1, "a"), 0)
    # Asked for what it just wrote, the store answers from memory...
    assert await store.last_seq("s") == 1
    assert await store.read("s", 1) == []
    await other_store.append("s", batch("s", 2, "b"), 1)
    # ...which the other store's commit has made stale.
    assert await store.last_seq("s") == 2
    assert ids(await store.read("s", 1)) == ["s-b-2"]


async def test_appending_after_another_stores_append_is_a_conflict_in_both_directions(
    store: SQLiteStore, other_store: SQLiteStore
) -> None:
    await store.append("s", batch("s", 1, "a"), 0)
    await other_store.append("s", batch("s", 2, "b"), 1)
    with pytest.raises(Conflict):
        await store.append("s", batch("s", 2, "a"), 1)
    await store.append("s", batch("s", 3, "a"), 2)
    with pytest.raises(Conflict):
        await other_store.append("s", batch("s", 3, "b"), 2)
    await other_store.append("s", batch("s", 4, "b"), 3)
    assert ids(await store.read("s")) == ["s-a-1", "s-b-2", "s-a-3", "s-b-4"]
    assert await other_store.last_seq("s") == 4


async def test_a_lease_taken_over_by_another_store_fences_its_old_holder(
    store: SQLiteStore, other_store: SQLiteStore, clock: Clock
) -> None:
    ours = await store.claim("s", "A", ttl=10)
    await store.append("s", batch("s", 1, "a"), 0, lease=ours)
    await store.append("s", batch("s", 2, "a"), 1, lease=ours)  # checked against the lease it knows
    clock.now += 11
    theirs = await other_store.claim("s", "B", ttl=30)
    with pytest.raises(LeaseLost):
        await store.append("s", batch("s", 3, "a"), 2, lease=ours)
    with pytest.raises(LeaseLost):
        await store.renew(ours, 30)
    with pytest.raises(LeaseHeld):
        await store.claim("s", "A", ttl=30)
    await other_store.append("s", batch("s", 3, "b"), 2, lease=theirs)
    await other_store.release(theirs)
    again = await store.claim("s", "A", ttl=30)
    assert again.generation == theirs.generation + 1
    with pytest.raises(LeaseLost):
        await other_store.append("s", batch("s", 4, "b"), 3, lease=theirs)
    await store.append("s", batch("s", 4, "a"), 3, lease=again)
    assert ids(await other_store.read("s")) == ["s-a-1", "s-a-2", "s-b-3", "s-a-4"]


async def test_a_lease_generation_bumped_by_a_plain_sqlite_writer_fences_the_holder(
    store: SQLiteStore, tmp_path: Path
) -> None:
    lease = await store.claim("s", "A", ttl=30)
    await store.append("s", batch("s", 1, "a"), 0, lease=lease)
    db = sqlite3.connect(tmp_path / "t.db")
    db.execute("UPDATE leases SET generation = generation + 1 WHERE session_id = 's'")
    db.commit()
    db.close()
    with pytest.raises(LeaseLost):
        await store.append("s", batch("s", 2, "a"), 1, lease=lease)
    assert await store.last_seq("s") == 1


def fail_with_a_database_error(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO tether_meta VALUES ('format', 'taken')")  # a duplicate key


async def test_a_group_that_fails_forgets_the_seqs_its_batches_wrote(
    store: SQLiteStore, other_store: SQLiteStore
) -> None:
    await store.append("s", batch("s", 1, "a"), 0)

    async def failing() -> None:
        # No public call fails with a database error after another batch in its group has
        # written, so this submits a body that does, as a backend's bug or a full disk would.
        await store._submit(fail_with_a_database_error)

    appended, failed = await in_one_group(
        store, store.append("s", batch("s", 2, "a"), 1), failing()
    )
    assert isinstance(appended, StoreError)  # rolled back with its group
    assert isinstance(failed, StoreError)
    assert await store.last_seq("s") == 1
    assert ids(await store.read("s", 1)) == []
    await store.append("s", batch("s", 2, "b"), 1)
    assert ids(await other_store.read("s")) == ["s-a-1", "s-b-2"]


async def test_a_claim_rolled_back_with_its_group_leaves_the_session_unclaimed(
    store: SQLiteStore,
) -> None:
    async def failing() -> None:
        await store._submit(fail_with_a_database_error)  # see the test above for why

    claimed, _ = await in_one_group(store, store.claim("s", "A", ttl=30), failing())
    assert isinstance(claimed, StoreError)
    assert await store.current_lease("s") is None
    lease = await store.claim("s", "B", ttl=30)
    assert lease.owner == "B"
    assert lease.generation == 1


async def test_a_batch_retried_in_its_own_group_is_accepted_once_and_a_rival_refused(
    store: SQLiteStore,
) -> None:
    await store.append("s", batch("s", 1, "a"), 0)
    retried = batch("s", 2, "a")
    first, retry, rival = await in_one_group(
        store,
        store.append("s", retried, 1),
        store.append("s", retried, 1),
        store.append("s", batch("s", 2, "z"), 1),
    )
    assert first is None
    assert retry is None
    assert isinstance(rival, Conflict)
    assert ids(await store.read("s")) == ["s-a-1", "s-a-2"]


async def test_an_append_whose_caller_is_cancelled_while_it_waits_still_lands(
    store: SQLiteStore, other_store: SQLiteStore
) -> None:
    opener = asyncio.create_task(store.append("opener", batch("opener", 1, "o"), 0))
    waiting = asyncio.create_task(store.append("s", batch("s", 1, "a"), 0))
    await asyncio.sleep(0)  # both submitted: the opener committed, the other waits for its group
    waiting.cancel()
    await asyncio.gather(opener, waiting, return_exceptions=True)
    assert waiting.cancelled()
    # Groups commit in order, so this append lands after the cancelled one, whenever that is.
    await store.append("s", batch("s", 2, "a"), 1)
    assert ids(await other_store.read("s")) == ["s-a-1", "s-a-2"]
