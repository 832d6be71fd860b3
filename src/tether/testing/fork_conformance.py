"""Forks in the store conformance suite (`Store.fork`, `fork_link`, and every read of a
fork's log): what the memory store's reference implementation does, every backend must.
Part of `STORE_CHECKS`."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence

from tether.errors import Conflict, SessionNotFound
from tether.events import (
    Event,
    ModelResponded,
    Payload,
    SessionCreated,
    SessionForked,
    TurnEnded,
    UserMessage,
)
from tether.messages import Message, Text, user
from tether.store import catalog
from tether.store.base import ForkLink, Snapshot, Store

Check = Callable[[Store], Awaitable[None]]

_TIME = "2026-01-01T00:00:00.000000Z"


def turn_events(session_id: str, start: int, n: int, tag: str = "a") -> list[Event]:
    """`n` events of whole turns from seq `start` (a message, a reply, the turn's end)."""
    cycle: list[Payload] = []
    for i in range(start, start + n):
        kind = i % 3
        if kind == 0:
            cycle.append(UserMessage(user(f"message {i} ✓")))
        elif kind == 1:
            cycle.append(ModelResponded(Message("assistant", (Text(f"reply {i}"),))))
        else:
            cycle.append(TurnEnded("end_turn"))
    return [
        Event(session_id, start + i, f"{session_id}-{tag}-{start + i}", _TIME, p)
        for i, p in enumerate(cycle)
    ]


async def _session(store: Store, session_id: str, n: int) -> list[Event]:
    first = Event(session_id, 1, f"{session_id}-a-1", _TIME, SessionCreated(model="scripted"))
    events = [first, *turn_events(session_id, 2, n - 1)]
    await store.append(session_id, events, 0)
    return events


def _named(events: Sequence[Event], session_id: str) -> list[Event]:
    return [dataclasses.replace(e, session_id=session_id) for e in events]


async def _fork(
    store: Store, child: str, parent: str, at: int, own: int = 2, tag: str = "f"
) -> list[Event]:
    """Fork `child` from `parent` at `at` with `own` events of its own; its whole log."""
    prefix = await store.read(parent, 0, at)
    forked = SessionForked(parent, at, prefix[-1].id, "digest", model="scripted")
    events = [
        Event(child, at + 1, f"{child}-{tag}-{at + 1}", _TIME, forked),
        *turn_events(child, at + 2, own - 1, tag),
    ]
    whole = _named(prefix, child) + events
    await store.fork(child, ForkLink(parent, at), events, row=catalog.row_for_log(whole))
    return whole


async def a_fork_reads_its_parents_prefix_under_its_own_id_then_its_own(store: Store) -> None:
    parent = await _session(store, "p", 7)
    whole = await _fork(store, "c", "p", 4)
    assert await store.read("c") == whole
    assert {e.session_id for e in await store.read("c")} == {"c"}
    assert await store.read("p") == parent  # the parent's own reads are its own
    assert await store.fork_link("c") == ForkLink("p", 4)
    assert await store.fork_link("p") is None
    assert await store.fork_link("nobody") is None
    assert await store.last_seq("c") == 6
    assert await store.last_seqs(["p", "c", "nobody"]) == {"p": 7, "c": 6}
    row = await store.catalog_row("c")
    assert row is not None and row.parent == "p" and row.last_seq == 6
    assert await store.session_ids() == ["c", "p"]
    assert await store.count_sessions() == 2


async def reads_of_a_fork_page_across_the_fork_point(store: Store) -> None:
    await _session(store, "p", 9)
    whole = await _fork(store, "c", "p", 5, own=4)
    for after in range(len(whole) + 2):
        for limit in (None, 0, 1, 2, 3, 4, 7, 100):
            got = await store.read("c", after, limit)
            end = None if limit is None else after + limit
            assert got == whole[after:end], (after, limit)
    paged: list[Event] = []
    while page := await store.read("c", len(paged), 2):
        paged += page
    assert paged == whole


async def a_fork_of_a_fork_reads_through_the_chain(store: Store) -> None:
    await _session(store, "p", 8)
    child = await _fork(store, "c", "p", 6, own=3)  # own seqs 7-9
    grandchild = await _fork(store, "g", "c", 7, own=2, tag="g")  # past the fork point
    early = await _fork(store, "h", "c", 3, own=2, tag="h")  # inside the parent's prefix
    deep = await _fork(store, "d", "g", 8, own=1, tag="d")
    assert grandchild == _named(child[:7], "g") + grandchild[7:]
    assert early[:3] == _named(child[:3], "h")
    assert deep[:8] == _named(grandchild[:8], "d")
    for sid, whole in (("c", child), ("g", grandchild), ("h", early), ("d", deep)):
        assert await store.read(sid) == whole, sid
        for after in range(len(whole)):
            assert await store.read(sid, after, 3) == whole[after : after + 3], (sid, after)
    assert await store.last_seqs(["c", "g", "h", "d"]) == {"c": 9, "g": 9, "h": 5, "d": 9}
    assert await store.fork_link("d") == ForkLink("g", 8)


async def appends_to_a_fork_go_on_after_its_last_seq(store: Store) -> None:
    await _session(store, "p", 7)
    whole = await _fork(store, "c", "p", 4)
    more = turn_events("c", 7, 3, "m")
    try:
        await store.append("c", turn_events("c", 5, 3, "m"), 4)
        raise AssertionError("an append at the fork point was accepted after the fork's own")
    except Conflict:
        pass
    await store.append("c", more, 6)  # no row: the store folds the whole log, prefix and all
    await store.append("c", more, 6)  # retried: accepted once
    assert await store.read("c") == whole + more
    assert await store.last_seq("c") == 9
    assert await store.catalog_row("c") == catalog.row_for_log(whole + more)
    # The parent goes on by itself; the child still sees the prefix it was forked at.
    later = turn_events("p", 8, 2, "later")
    await store.append("p", later, 7)
    assert await store.read("c") == whole + more
    assert (await store.read("p"))[-2:] == later


async def a_retried_fork_is_accepted_once_and_another_conflicts(store: Store) -> None:
    await _session(store, "p", 6)
    await _session(store, "q", 3)
    whole = await _fork(store, "c", "p", 4)
    await store.fork("c", ForkLink("p", 4), whole[4:], row=catalog.row_for_log(whole))
    assert await store.read("c") == whole
    other = _named(await _fork_events(store, "p", 4, "other"), "c")
    for link, events in (
        (ForkLink("p", 4), other),  # other events at those seqs
        (ForkLink("p", 3), [dataclasses.replace(e, seq=e.seq - 1) for e in whole[4:]]),
        (ForkLink("q", 2), [dataclasses.replace(e, seq=e.seq - 2) for e in whole[4:]]),
    ):
        row = catalog.row_for_log([*whole[: link.at], *events])
        try:
            await store.fork("c", link, events, row=row)
            raise AssertionError(f"a second fork {link} onto c was accepted")
        except Conflict:
            pass
    onto = _named(await _fork_events(store, "p", 2, "onto"), "q")
    try:  # a session that is not a fork cannot become one
        await store.fork("q", ForkLink("p", 2), onto, row=catalog.row_for_log(onto))
        raise AssertionError("a fork onto an existing session was accepted")
    except Conflict:
        pass
    assert await store.read("c") == whole
    assert await store.fork_link("q") is None


async def _fork_events(store: Store, parent: str, at: int, tag: str) -> list[Event]:
    prefix = await store.read(parent, 0, at)
    forked = SessionForked(parent, at, prefix[-1].id, tag, model="scripted")
    return [
        Event(parent, at + 1, f"{tag}-{at + 1}", _TIME, forked),
        *turn_events(parent, at + 2, 1, tag),
    ]


async def a_fork_of_a_missing_or_short_parent_is_refused_and_writes_nothing(store: Store) -> None:
    await _session(store, "p", 4)
    for link in (ForkLink("nobody", 1), ForkLink("p", 5), ForkLink("p", 0)):
        events = _named(await _fork_events(store, "p", max(link.at, 1), "x"), "x")
        events = [dataclasses.replace(e, seq=link.at + i) for i, e in enumerate(events, 1)]
        try:
            await store.fork("x", link, events, row=catalog.row_for_log(events))
            raise AssertionError(f"a fork at {link} was accepted")
        except SessionNotFound:
            pass
    assert await store.read("x") == []
    assert await store.last_seq("x") == 0
    assert await store.fork_link("x") is None
    assert await store.catalog_row("x") is None
    assert await store.count_sessions() == 1


async def a_parents_snapshot_is_carried_only_when_at_or_before_the_fork_point(
    store: Store,
) -> None:
    await _session(store, "p", 7)
    kept = Snapshot("p", 4, "v1", b"\x00fold\xff" * 100)
    await store.put_snapshot(kept)
    await _fork(store, "at", "p", 4)
    await _fork(store, "after", "p", 6)
    await _fork(store, "before", "p", 3)
    assert await store.get_snapshot("at") == dataclasses.replace(kept, session_id="at")
    assert await store.get_snapshot("after") == dataclasses.replace(kept, session_id="after")
    assert await store.get_snapshot("before") is None
    await _fork(store, "grand", "after", 5, tag="g")  # the one "after" was forked with
    assert await store.get_snapshot("grand") == dataclasses.replace(kept, session_id="grand")
    await store.put_snapshot(Snapshot("p", 7, "v1", b"newer"))  # the parent's own, later
    await store.put_snapshot(Snapshot("p", 8, "v1", b"newest"))
    for child in ("at", "after", "grand"):  # each keeps the one it was forked with
        assert await store.get_snapshot(child) == dataclasses.replace(kept, session_id=child)
    await _fork(store, "late", "p", 5, tag="l")  # the parent's is past the point now
    assert await store.get_snapshot("late") is None
    own = Snapshot("at", 6, "v1", b"the child's own")
    await store.put_snapshot(own)
    assert await store.get_snapshot("at") == own
    assert await store.get_snapshot("after") == dataclasses.replace(kept, session_id="after")


async def a_rebuild_and_put_catalog_row_see_a_forks_own_last_seq(store: Store) -> None:
    await _session(store, "p", 7)
    whole = await _fork(store, "c", "p", 4)
    row = catalog.row_for_log(whole)
    assert not await store.put_catalog_row(dataclasses.replace(row, last_seq=4, task="stale"))
    assert await store.put_catalog_row(dataclasses.replace(row, task="rebuilt"))
    assert (await store.catalog_row("c")).task == "rebuilt"  # type: ignore[union-attr]
    assert await catalog.rebuild(store) == 2
    assert await store.catalog_row("c") == row
    assert row.parent == "p" and row.last_seq == 6


FORK_CHECKS: list[Check] = [
    a_fork_reads_its_parents_prefix_under_its_own_id_then_its_own,
    reads_of_a_fork_page_across_the_fork_point,
    a_fork_of_a_fork_reads_through_the_chain,
    appends_to_a_fork_go_on_after_its_last_seq,
    a_retried_fork_is_accepted_once_and_another_conflicts,
    a_fork_of_a_missing_or_short_parent_is_refused_and_writes_nothing,
    a_parents_snapshot_is_carried_only_when_at_or_before_the_fork_point,
    a_rebuild_and_put_catalog_row_see_a_forks_own_last_seq,
]
