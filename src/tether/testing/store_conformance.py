"""The store conformance suite: what every event store must do (log, leases, forks:
fork_conformance.py, and the work queue: wakeup_conformance.py, claim_conformance.py), as
plain async checks.

Each check takes a fresh, empty store and raises AssertionError on a violation. A backend's
tests run them all, e.g. `@pytest.mark.parametrize("check", STORE_CHECKS)`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tether.errors import Conflict, LeaseHeld, LeaseLost, UsageError
from tether.events import Event, ModelResponded, Payload, SessionCreated, ToolFinished, UserMessage
from tether.messages import Message, Text, ToolCall, Usage, user
from tether.store.base import Store
from tether.testing.claim_conformance import CLAIM_CHECKS
from tether.testing.fork_conformance import FORK_CHECKS
from tether.testing.wakeup_conformance import WAKEUP_CHECKS

Check = Callable[[Store], Awaitable[None]]


def make_events(
    session_id: str, start_seq: int, payloads: list[Payload], tag: str = "a"
) -> list[Event]:
    return [
        Event(
            session_id,
            start_seq + i,
            f"{session_id}-{tag}-{start_seq + i}",
            "2026-01-01T00:00:00.000000Z",
            p,
        )
        for i, p in enumerate(payloads)
    ]


def _sample(n: int) -> list[Payload]:
    base: list[Payload] = [
        SessionCreated(model="scripted", system="Be brief. Ünïcode ✓", tools={"add": "abc"}),
        UserMessage(user("hello\nworld \u2603")),
        ModelResponded(
            Message("assistant", (Text("sure"), ToolCall("c1", "add", {"a": 1, "b": [1.5, None]}))),
            stop="tool_calls",
            raw_stop_reason="tool_use",
            usage=Usage(10, 5, 1, 2, 3),
            cost_usd=0.25,
        ),
        ToolFinished("c1", "ok", "2", 1.5),
    ]
    return [base[i % len(base)] for i in range(n)]


async def appended_events_read_back_equal(store: Store) -> None:
    events = make_events("s1", 1, _sample(4))
    await store.append("s1", events, 0)
    assert await store.read("s1") == events
    assert await store.last_seq("s1") == 4
    assert await store.read("s1", after_seq=2) == events[2:]


async def a_read_with_a_limit_returns_the_first_events_after_the_seq(store: Store) -> None:
    events = make_events("s1", 1, _sample(7))
    await store.append("s1", events[:4], 0)
    await store.append("s1", events[4:], 4)
    assert await store.read("s1", limit=3) == events[:3]
    assert await store.read("s1", after_seq=2, limit=3) == events[2:5]
    assert await store.read("s1", after_seq=5, limit=10) == events[5:]
    assert await store.read("s1", after_seq=7, limit=1) == []
    assert await store.read("s1", after_seq=1, limit=0) == []
    assert await store.read("nobody", limit=5) == []
    paged: list[Event] = []
    while page := await store.read("s1", paged[-1].seq if paged else 0, limit=2):
        paged.extend(page)
    assert paged == events
    try:
        await store.read("s1", limit=-1)
    except UsageError:
        pass
    else:
        raise AssertionError("a negative read limit was accepted")


async def a_stale_expected_seq_is_a_conflict(store: Store) -> None:
    await store.append("s1", make_events("s1", 1, _sample(2)), 0)
    stale = make_events("s1", 2, _sample(1), tag="b")
    try:
        await store.append("s1", stale, 1)
    except Conflict as exc:
        assert exc.actual_seq == 2
    else:
        raise AssertionError("a stale expected_seq was accepted")
    assert [e.id for e in await store.read("s1")] == ["s1-a-1", "s1-a-2"]


async def a_retried_batch_is_accepted_once(store: Store) -> None:
    batch = make_events("s1", 1, _sample(3))
    await store.append("s1", batch, 0)
    await store.append("s1", batch, 0)  # the same call again, e.g. after a lost reply
    assert len(await store.read("s1")) == 3
    later = make_events("s1", 4, _sample(1))
    await store.append("s1", later, 3)
    await store.append("s1", batch, 0)  # still recognised once the log has moved on
    assert [e.seq for e in await store.read("s1")] == [1, 2, 3, 4]


async def a_batch_with_other_ids_at_stored_seqs_conflicts(store: Store) -> None:
    await store.append("s1", make_events("s1", 1, _sample(2)), 0)
    try:
        await store.append("s1", make_events("s1", 1, _sample(2), tag="other"), 0)
    except Conflict:
        pass
    else:
        raise AssertionError("a different batch at stored seqs was accepted")


async def a_malformed_batch_is_refused_and_writes_nothing(store: Store) -> None:
    gap = make_events("s1", 1, _sample(1)) + make_events("s1", 3, _sample(1))
    for bad in (gap, make_events("other", 1, _sample(1)), []):
        try:
            await store.append("s1", bad, 0)
        except UsageError:
            pass
        else:
            raise AssertionError(f"malformed batch accepted: {bad}")
    assert await store.read("s1") == []
    assert await store.last_seq("s1") == 0


async def concurrent_appends_at_one_seq_let_exactly_one_win(store: Store) -> None:
    await store.append("s1", make_events("s1", 1, _sample(1)), 0)

    async def attempt(tag: str) -> bool:
        try:
            await store.append("s1", make_events("s1", 2, _sample(2), tag=tag), 1)
        except Conflict:
            return False
        return True

    wins = await asyncio.gather(*(attempt(f"w{i}") for i in range(8)))
    assert sum(wins) == 1, f"{sum(wins)} writers won"
    events = await store.read("s1")
    assert [e.seq for e in events] == [1, 2, 3]
    assert len({e.id.split("-")[1] for e in events[1:]}) == 1, "a batch was split between writers"


async def sessions_are_separate_and_listed(store: Store) -> None:
    await store.append("s1", make_events("s1", 1, _sample(2)), 0)
    await store.append("s2", make_events("s2", 1, _sample(3)), 0)
    assert len(await store.read("s1")) == 2
    assert len(await store.read("s2")) == 3
    listed = {i.session_id: i.last_seq for i in await store.sessions()}
    assert listed == {"s1": 2, "s2": 3}
    assert await store.last_seqs(["s1", "s2", "nobody"]) == {"s1": 2, "s2": 3}
    assert await store.read("nobody") == []
    assert await store.last_seq("nobody") == 0


async def large_and_unicode_payloads_round_trip(store: Store) -> None:
    big = "x" * 2_000_000 + "\u0000\u2028\U0001f600"
    events = make_events("s1", 1, [ToolFinished("c", "ok", big)])
    await store.append("s1", events, 0)
    assert await store.read("s1") == events


async def a_lone_surrogate_is_kept_and_fails_no_other_append(store: Store) -> None:
    # `json.loads` makes one from a model's "\\ud800"; it has no UTF-8 form, and stores that
    # write UTF-8 must still keep it, without failing appends committed alongside.
    odd = make_events("odd", 1, [ToolFinished("c", "ok", "half \ud800 a pair")])
    fine = make_events("fine", 1, [ToolFinished("c", "ok", "fine")])
    await asyncio.gather(store.append("odd", odd, 0), store.append("fine", fine, 0))
    assert await store.read("odd") == odd
    assert await store.read("fine") == fine


async def a_held_lease_refuses_another_claim(store: Store) -> None:
    lease = await store.claim("s1", "worker-a", ttl=30)
    assert lease.generation >= 1 and lease.owner == "worker-a"
    try:
        await store.claim("s1", "worker-b", ttl=30)
    except LeaseHeld as exc:
        assert exc.owner == "worker-a"
    else:
        raise AssertionError("a held lease was claimed by another worker")
    current = await store.current_lease("s1")
    assert current is not None and current.generation == lease.generation
    assert await store.current_lease("nobody") is None


async def an_append_under_a_stale_lease_is_refused_and_writes_nothing(store: Store) -> None:
    first = await store.claim("s1", "worker-a", ttl=0.05)
    await store.append("s1", make_events("s1", 1, _sample(1)), 0, lease=first)
    await asyncio.sleep(0.1)  # let it expire: only then may another worker take over
    second = await store.claim("s1", "worker-b", ttl=30)
    assert second.generation > first.generation
    for attempt in (
        store.append("s1", make_events("s1", 2, _sample(1), tag="zombie"), 1, lease=first),
        store.renew(first, ttl=30),
    ):
        try:
            await attempt
        except LeaseLost:
            pass
        else:
            raise AssertionError("a stale lease was honoured")
    await store.append("s1", make_events("s1", 2, _sample(1), tag="b"), 1, lease=second)
    assert [e.id for e in await store.read("s1")] == ["s1-a-1", "s1-b-2"]


async def control_appends_need_no_lease_and_renewal_extends_it(store: Store) -> None:
    lease = await store.claim("s1", "worker-a", ttl=30)
    await store.append("s1", make_events("s1", 1, _sample(1), tag="control"), 0)
    renewed = await store.renew(lease, ttl=60)
    assert renewed.generation == lease.generation and renewed.expires > lease.expires
    await store.append("s1", make_events("s1", 2, _sample(1)), 1, lease=renewed)
    assert await store.last_seq("s1") == 2


async def a_released_lease_can_be_claimed_at_once(store: Store) -> None:
    lease = await store.claim("s1", "worker-a", ttl=30)
    await store.release(lease)
    assert await store.current_lease("s1") is None
    taken = await store.claim("s1", "worker-b", ttl=30)
    assert taken.generation > lease.generation
    try:
        await store.append("s1", make_events("s1", 1, _sample(1)), 0, lease=lease)
    except LeaseLost:
        pass
    else:
        raise AssertionError("a released lease could still append")
    await store.release(lease)  # releasing a lost lease is not an error
    assert await store.current_lease("s1") == taken


async def a_working_store_is_ready_and_the_check_leaves_the_log_alone(store: Store) -> None:
    await store.ready()
    events = make_events("s1", 1, _sample(2))
    await store.append("s1", events, 0)
    await asyncio.gather(*(store.ready() for _ in range(4)))  # checks at once never clash
    await store.check_integrity()  # a sound store passes the thorough check too
    await store.ready()
    assert await store.read("s1") == events
    assert [i.session_id for i in await store.sessions()] == ["s1"]


STORE_CHECKS: list[Check] = [
    appended_events_read_back_equal,
    a_read_with_a_limit_returns_the_first_events_after_the_seq,
    a_stale_expected_seq_is_a_conflict,
    a_retried_batch_is_accepted_once,
    a_batch_with_other_ids_at_stored_seqs_conflicts,
    a_malformed_batch_is_refused_and_writes_nothing,
    concurrent_appends_at_one_seq_let_exactly_one_win,
    sessions_are_separate_and_listed,
    large_and_unicode_payloads_round_trip,
    a_lone_surrogate_is_kept_and_fails_no_other_append,
    a_held_lease_refuses_another_claim,
    an_append_under_a_stale_lease_is_refused_and_writes_nothing,
    control_appends_need_no_lease_and_renewal_extends_it,
    a_released_lease_can_be_claimed_at_once,
    a_working_store_is_ready_and_the_check_leaves_the_log_alone,
    *FORK_CHECKS,
    *WAKEUP_CHECKS,
    *CLAIM_CHECKS,
]


async def run_store_conformance(factory: Callable[[], Awaitable[Store]]) -> None:
    """Run every check, each on a fresh store from `factory`."""
    for check in STORE_CHECKS:
        store = await factory()
        try:
            await check(store)
        finally:
            await store.close()
