"""Store conformance checks for `claim_runnable`: handing runnable sessions to workers, each to
one, with the claims counted that find sessions which kill their workers. Part of
`STORE_CHECKS`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tether.errors import LeaseHeld, LeaseLost, UsageError
from tether.events import Event, UserMessage
from tether.messages import user
from tether.store.base import Claimed, Store

Check = Callable[[Store], Awaitable[None]]


def _one_event(session_id: str, seq: int, tag: str) -> list[Event]:
    return [
        Event(
            session_id,
            seq,
            f"{session_id}-{tag}-{seq}",
            "2026-01-01T00:00:00.000000Z",
            UserMessage(user(tag)),
        )
    ]


def _taken(claimed: list[Claimed]) -> list[tuple[str, int]]:
    return [(c.lease.session_id, c.claims) for c in claimed]


async def workers_claiming_at_once_get_different_sessions(store: Store) -> None:
    names = [f"s{i}" for i in range(10)]
    for sid in names:
        await store.mark_runnable(sid)
    first, second = await asyncio.gather(
        store.claim_runnable("worker-a", ttl=30, limit=10, alone=False),
        store.claim_runnable("worker-b", ttl=30, limit=10, alone=False),
    )
    taken = [c.lease.session_id for c in first + second]
    assert sorted(taken) == names, f"a session was claimed twice or lost: {taken}"
    for owner, batch in (("worker-a", first), ("worker-b", second)):
        for c in batch:
            assert c.lease.owner == owner and c.claims == 1 and c.lease.generation >= 1, c
            assert c.wakeup.session_id == c.lease.session_id
            assert await store.current_lease(c.lease.session_id) == c.lease
    assert await store.runnable() == [], "a claimed session was still listed"
    assert await store.claim_runnable("worker-c", ttl=30, limit=5, alone=True) == []


async def claimed_sessions_come_oldest_first_within_the_limit_and_fence_appends(
    store: Store,
) -> None:
    for sid in ("s3", "s1", "s2", "held"):
        await store.mark_runnable(sid)
        await asyncio.sleep(0.002)  # distinct mark times on a coarse clock
    await store.claim("held", "worker-z", ttl=30)  # a live lease: not handed out
    got = await store.claim_runnable("worker-a", ttl=30, limit=2, alone=False)
    assert _taken(got) == [("s3", 1), ("s1", 1)]
    rest = await store.claim_runnable("worker-b", ttl=30, limit=5, alone=False)
    assert _taken(rest) == [("s2", 1)]
    # The lease claimed is the session's current one: appends under it go in, and a claim
    # by another worker is refused.
    lease = got[0].lease
    await store.append("s3", _one_event("s3", 1, "a"), 0, lease=lease)
    try:
        await store.claim("s3", "worker-b", ttl=30)
    except LeaseHeld:
        pass
    else:
        raise AssertionError("a claimed session was claimed again by another worker")
    # The mark stays until the runner clears it: released, s3 is runnable again, and the
    # next claim fences out the lease before it.
    await store.release(lease)
    again = await store.claim_runnable("worker-b", ttl=30, limit=5, alone=False)
    assert [c.lease.session_id for c in again] == ["s3"]
    assert again[0].wakeup == got[0].wakeup and again[0].lease.generation > lease.generation
    try:
        await store.append("s3", _one_event("s3", 2, "a"), 1, lease=lease)
    except LeaseLost:
        pass
    else:
        raise AssertionError("an append under a superseded claim was accepted")
    await store.append("s3", _one_event("s3", 2, "b"), 1, lease=again[0].lease)


async def a_deferred_mark_is_not_claimed_until_its_time(store: Store) -> None:
    await store.mark_runnable("later")
    await store.mark_runnable("now")
    await store.defer("later", 0.3, "parked")
    got = await store.claim_runnable("worker-a", ttl=30, limit=5, alone=True)
    assert _taken(got) == [("now", 1)], "a deferred session was claimed before its time"
    assert await store.claim_runnable("worker-b", ttl=30, limit=5, alone=True) == []
    assert await store.current_lease("later") is None
    await asyncio.sleep(0.4)
    later = await store.claim_runnable("worker-b", ttl=30, limit=5, alone=False)
    assert _taken(later) == [("later", 1)]


async def _dies_holding(store: Store, session_id: str, owner: str) -> Claimed:
    """`owner` claims the session (it must be handed out) and dies: its lease runs out."""
    claimed = await store.claim_runnable(owner, ttl=0.1, limit=10)
    got = [c for c in claimed if c.lease.session_id == session_id]
    assert got, f"{session_id} was not handed out to {owner}"
    await asyncio.sleep(0.2)
    return got[0]


async def a_dead_workers_sessions_go_to_any_worker_oldest_expiry_first(store: Store) -> None:
    await store.mark_runnable("fresh0")
    await asyncio.sleep(0.002)
    for sid in ("late", "early"):
        await store.mark_runnable(sid)
        await asyncio.sleep(0.002)
    await store.claim("early", "worker-a", ttl=0.1)  # worker-a runs both and dies
    await asyncio.sleep(0.02)
    await store.claim("late", "worker-a", ttl=0.1)
    await asyncio.sleep(0.2)
    # A busy worker takes them over, before older fresh work, the oldest expiry first.
    busy = await store.claim_runnable("worker-b", ttl=30, limit=2, alone=False)
    assert _taken(busy) == [("early", 2), ("late", 2)], _taken(busy)
    rest = await store.claim_runnable("worker-c", ttl=30, limit=5, alone=False)
    assert _taken(rest) == [("fresh0", 1)]


async def a_suspect_goes_only_to_a_claim_that_may_take_one_and_alone(store: Store) -> None:
    await store.mark_runnable("suspect")
    await _dies_holding(store, "suspect", "worker-a")
    await _dies_holding(store, "suspect", "worker-b")
    await _dies_holding(store, "suspect", "worker-c")  # a third time, none forgiven: a suspect
    for i in range(3):
        await store.mark_runnable(f"fresh{i}")
    busy = await store.claim_runnable("worker-b", ttl=30, limit=10, alone=False)
    assert _taken(busy) == [("fresh0", 1), ("fresh1", 1), ("fresh2", 1)]
    assert await store.claim_runnable("worker-c", ttl=30, limit=10, alone=False) == []
    await store.mark_runnable("fresh3")  # even with other work to take, the suspect goes alone
    idle = await store.claim_runnable("worker-d", ttl=30, limit=10, alone=True)
    assert _taken(idle) == [("suspect", 4)], "a suspect was not handed out by itself"
    assert [w.session_id for w in await store.runnable()] == ["fresh3"]
    # Released cleanly, it is no suspect any more: it goes with other work, in mark order.
    await store.release(idle[0].lease)
    rest = await store.claim_runnable("worker-e", ttl=30, limit=10, alone=True)
    assert _taken(rest) == [("suspect", 1), ("fresh3", 1)]


async def a_claim_that_may_take_a_suspect_takes_the_oldest_before_older_work(store: Store) -> None:
    await store.mark_runnable("old")
    await asyncio.sleep(0.002)
    await store.mark_runnable("suspect")
    await store.claim("suspect", "worker-a", ttl=0.1)  # worker-a runs it and dies
    await asyncio.sleep(0.2)
    for owner in ("worker-b", "worker-c"):  # and two more
        await store.claim("suspect", owner, ttl=0.1)
        await asyncio.sleep(0.2)
    idle = await store.claim_runnable("worker-c", ttl=30, limit=5, alone=True)
    assert _taken(idle) == [("suspect", 4)]
    busy = await store.claim_runnable("worker-d", ttl=30, limit=5, alone=False)
    assert _taken(busy) == [("old", 1)]


async def an_acquitted_session_is_no_suspect_when_its_worker_dies_again(store: Store) -> None:
    await store.mark_runnable("s1")
    await _dies_holding(store, "s1", "worker-a")
    await _dies_holding(store, "s1", "worker-b")
    [taken] = await store.claim_runnable("worker-c", ttl=0.1, limit=1, alone=False)
    assert _taken([taken]) == [("s1", 3)]
    await store.acquit(taken.lease)  # the deaths before were none of its doing
    await asyncio.sleep(0.2)  # worker-c dies too
    busy = await store.claim_runnable("worker-d", ttl=30, limit=1, alone=False)
    assert _taken(busy) == [("s1", 2)], "an acquitted session was held back as a suspect"
    await store.acquit(taken.lease)  # a stale lease acquits nothing
    await store.release(busy[0].lease)
    assert _taken(await store.claim_runnable("worker-e", ttl=30, limit=1)) == [("s1", 1)]


async def a_clean_release_resets_the_claims(store: Store) -> None:
    await store.mark_runnable("s1")
    first = await store.claim_runnable("worker-a", ttl=30, limit=1, alone=False)
    assert _taken(first) == [("s1", 1)]
    await store.release(first[0].lease)  # the run ended well
    # No suspect, so a busy worker may take it; the count starts again.
    second = await store.claim_runnable("worker-b", ttl=0.1, limit=1, alone=False)
    assert _taken(second) == [("s1", 1)]
    assert second[0].lease.generation > first[0].lease.generation
    await asyncio.sleep(0.2)  # this time the worker dies holding it: a takeover
    third = await store.claim_runnable("worker-c", ttl=0.1, limit=1, alone=False)
    assert _taken(third) == [("s1", 2)]
    await asyncio.sleep(0.2)  # and again: still a takeover
    again = await store.claim_runnable("worker-c", ttl=0.1, limit=1, alone=False)
    assert _taken(again) == [("s1", 3)]
    await asyncio.sleep(0.2)  # and a third time: now a suspect
    assert await store.claim_runnable("worker-d", ttl=30, limit=1, alone=False) == []
    fourth = await store.claim_runnable("worker-d", ttl=30, limit=1, alone=True)
    assert _taken(fourth) == [("s1", 4)]
    await store.release(fourth[0].lease)
    fifth = await store.claim_runnable("worker-e", ttl=30, limit=1, alone=False)
    assert _taken(fifth) == [("s1", 1)]


async def an_append_under_a_released_lease_is_refused(store: Store) -> None:
    await store.mark_runnable("s1")
    [got] = await store.claim_runnable("worker-a", ttl=30, limit=1)
    await store.append("s1", _one_event("s1", 1, "a"), 0, got.lease)
    await store.release(got.lease)
    try:
        await store.append("s1", _one_event("s1", 2, "b"), 1, got.lease)
    except LeaseLost:
        pass
    else:
        raise AssertionError("an append under a released lease was accepted")
    try:
        await store.renew(got.lease, 30)
    except LeaseLost:
        pass
    else:
        raise AssertionError("a released lease was renewed")
    assert await store.last_seq("s1") == 1


async def a_claim_of_no_sessions_or_without_a_ttl_is_refused(store: Store) -> None:
    await store.mark_runnable("s1")
    for ttl, limit in ((30.0, 0), (30.0, -1), (0.0, 1)):
        try:
            await store.claim_runnable("worker-a", ttl=ttl, limit=limit, alone=True)
        except UsageError:
            pass
        else:
            raise AssertionError(f"claim_runnable(ttl={ttl}, limit={limit}) was accepted")
    assert await store.current_lease("s1") is None
    assert [w.session_id for w in await store.runnable()] == ["s1"]


CLAIM_CHECKS: list[Check] = [
    workers_claiming_at_once_get_different_sessions,
    claimed_sessions_come_oldest_first_within_the_limit_and_fence_appends,
    a_deferred_mark_is_not_claimed_until_its_time,
    a_dead_workers_sessions_go_to_any_worker_oldest_expiry_first,
    a_suspect_goes_only_to_a_claim_that_may_take_one_and_alone,
    a_claim_that_may_take_a_suspect_takes_the_oldest_before_older_work,
    an_acquitted_session_is_no_suspect_when_its_worker_dies_again,
    a_clean_release_resets_the_claims,
    an_append_under_a_released_lease_is_refused,
    a_claim_of_no_sessions_or_without_a_ttl_is_refused,
]
