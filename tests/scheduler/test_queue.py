"""The order of waiting requests: priority, weighted fairness between tenants, FIFO."""

from __future__ import annotations

from collections import Counter
from itertools import count

import pytest

from tether.scheduler.queue import Entry, FairQueue, Priority

_seq = count()


def entry(
    tenant: str, priority: Priority = "batch", cost: float = 1.0, seq: int | None = None
) -> Entry[str]:
    n = next(_seq) if seq is None else seq
    return Entry(tenant, priority, cost, n, f"{tenant}#{n}")


def drain(queue: FairQueue[str], n: int) -> list[Entry[str]]:
    out = []
    for _ in range(n):
        popped = queue.pop()
        assert popped is not None
        out.append(popped)
    return out


def test_interactive_goes_before_batch_whatever_arrived_first() -> None:
    queue: FairQueue[str] = FairQueue()
    first = entry("a", "batch")
    queue.push(first)
    urgent = entry("b", "interactive")
    queue.push(urgent)
    assert [e.payload for e in drain(queue, 2)] == [urgent.payload, first.payload]


def test_equals_go_in_arrival_order() -> None:
    queue: FairQueue[str] = FairQueue()
    entries = [entry("a") for _ in range(5)]
    for e in entries:
        queue.push(e)
    assert drain(queue, 5) == entries


def test_a_tenant_with_a_thousand_sessions_cannot_starve_a_tenant_with_one() -> None:
    queue: FairQueue[str] = FairQueue()
    for _ in range(1000):
        queue.push(entry("crowd"))
    lone = entry("lone")
    queue.push(lone)
    served = drain(queue, 2)
    assert lone in served


def test_backlogged_tenants_are_served_in_proportion_to_their_weights() -> None:
    queue: FairQueue[str] = FairQueue({"a": 1, "b": 1, "c": 2})
    # Very unequal crowds: the share must follow the weights, not the number of waiters.
    for tenant, n in (("a", 3000), ("b", 300), ("c", 400)):
        for _ in range(n):
            queue.push(entry(tenant))
    shares = Counter(e.tenant for e in drain(queue, 400))
    assert shares == {"a": 100, "b": 100, "c": 200}


def test_fairness_counts_cost_not_requests() -> None:
    queue: FairQueue[str] = FairQueue()
    for _ in range(100):
        queue.push(entry("big", cost=10))
        queue.push(entry("small", cost=1))
    served = Counter(e.tenant for e in drain(queue, 55))
    assert served == {"small": 50, "big": 5}


def test_an_idle_tenant_banks_no_credit() -> None:
    queue: FairQueue[str] = FairQueue()
    for _ in range(50):
        queue.push(entry("busy"))
    drain(queue, 40)  # "late" was idle all this time
    for _ in range(20):
        queue.push(entry("late"))
    served = Counter(e.tenant for e in drain(queue, 10))
    assert served == {"busy": 5, "late": 5}  # alternation, not a burst of 10 for "late"


def test_a_removed_entry_is_never_served_and_its_tenant_is_not_charged() -> None:
    queue: FairQueue[str] = FairQueue()
    gone = entry("a", cost=100)
    queue.push(gone)
    kept = entry("a")
    queue.push(kept)
    queue.push(entry("b"))
    assert queue.remove(gone)
    assert not queue.remove(gone)
    assert len(queue) == 2
    assert drain(queue, 1) == [kept]  # "a" was not charged 100 for the removed entry


def test_a_request_put_back_keeps_its_place_among_equals() -> None:
    queue: FairQueue[str] = FairQueue()
    retried = entry("a")
    later = [entry("a") for _ in range(3)]
    for e in later:
        queue.push(e)
    queue.push(Entry("a", "batch", 1.0, retried.seq, "retry"))  # back after a backoff
    first = queue.pop()
    assert first is not None and first.payload == "retry"


def test_a_late_charge_for_a_larger_answer_moves_the_tenant_back() -> None:
    queue: FairQueue[str] = FairQueue()
    for _ in range(10):
        queue.push(entry("a"))
        queue.push(entry("b"))
    drain(queue, 2)
    queue.charge("a", "batch", 5.0)  # its answer was 5 units larger than reserved
    served = Counter(e.tenant for e in drain(queue, 6))
    assert served["b"] > served["a"]


def test_depths_count_live_entries_by_priority_and_tenant() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push(entry("a", "interactive"))
    queue.push(entry("a", "batch"))
    queue.push(entry("b", "batch"))
    assert (queue.depth("interactive"), queue.depth("batch")) == (1, 2)
    assert queue.tenant_depth("a") == 2
    assert len(list(queue.entries())) == 3


def test_weights_must_be_positive() -> None:
    with pytest.raises(ValueError):
        FairQueue({"a": 0})
