"""The order in which waiting requests go out: priority between classes (interactive before
batch; with aging, a batch request that has waited `batch_aging` seconds longer than the
oldest interactive one goes first), weighted fair queueing between tenants within a class,
FIFO among equals.

Fairness is start-time fair queueing (SFQ): a tenant's next request carries a virtual start
tag; the lowest tag goes first; serving `cost` moves the tenant's tag on by `cost / weight`.
A tenant that was idle starts at the class's current virtual time, so idling banks no credit,
and a tenant's number of sessions changes nothing: only its weight counts. Pure: no clock,
no asyncio.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tether.providers.base import Priority as Priority  # the queue's classes, re-exported

PRIORITIES: tuple[Priority, ...] = ("interactive", "batch")

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class Entry(Generic[T]):
    """One waiting request. Its place among equals is (`arrived`, `seq`): when it first
    queued (seconds, the caller's clock) and its arrival order, both kept across retries so
    a retried request does not lose its place; a request that queued elsewhere first (a
    parked session's, asked again by another process) brings an earlier `arrived`."""

    tenant: str
    priority: Priority
    cost: float
    seq: int
    payload: T
    live: bool = True
    since: float = 0.0  # when it was queued (seconds, the caller's clock): for aging
    arrived: float = 0.0


@dataclass(slots=True)
class _TenantQueue(Generic[T]):
    heap: list[tuple[float, int, int, Entry[T]]] = field(default_factory=list)
    live: int = 0
    start: float = 0.0  # virtual start tag of the head, while the tenant has live entries
    finish: float = 0.0  # virtual finish tag of its last served request

    def head(self) -> Entry[T] | None:
        while self.heap and not self.heap[0][3].live:
            heapq.heappop(self.heap)
        return self.heap[0][3] if self.heap else None


@dataclass(slots=True)
class _Class(Generic[T]):
    tenants: dict[str, _TenantQueue[T]] = field(default_factory=dict)
    vtime: float = 0.0
    live: int = 0
    # Entries by arrival time, for aging (kept only when the queue ages): served and removed
    # ones are dropped when they reach the top.
    arrivals: list[tuple[float, int, Entry[T]]] = field(default_factory=list)

    def oldest(self) -> float | None:
        while self.arrivals and not self.arrivals[0][2].live:
            heapq.heappop(self.arrivals)
        return self.arrivals[0][0] if self.arrivals else None


class FairQueue(Generic[T]):
    """`push`, `peek`, `pop`, `remove`. `weights` maps tenant to weight (default 1).
    `batch_aging`: None, strict priority (batch waits while any interactive request does);
    else a batch request's priority rises with its wait: the batch class goes first when its
    oldest request arrived `batch_aging` seconds or more before the oldest interactive one
    (by `Entry.since`), so no batch request waits more than `batch_aging` seconds longer
    than the interactive requests served meanwhile."""

    def __init__(
        self, weights: Mapping[str, float] | None = None, *, batch_aging: float | None = None
    ) -> None:
        if batch_aging is not None and batch_aging < 0:
            raise ValueError(f"batch_aging must be None or at least 0, not {batch_aging}")
        self._aging = batch_aging
        self._weights = dict(weights or {})
        for tenant, weight in self._weights.items():
            if weight <= 0:
                raise ValueError(f"tenant {tenant!r}: weight must be positive, not {weight}")
        self._classes: dict[Priority, _Class[T]] = {p: _Class() for p in PRIORITIES}
        self._pushes = 0

    def weight(self, tenant: str) -> float:
        return self._weights.get(tenant, 1.0)

    def __len__(self) -> int:
        return sum(c.live for c in self._classes.values())

    def depth(self, priority: Priority) -> int:
        return self._classes[priority].live

    def tenant_depth(self, tenant: str) -> int:
        return sum(q.live for c in self._classes.values() if (q := c.tenants.get(tenant)))

    def push(self, entry: Entry[T]) -> None:
        cls = self._classes[entry.priority]
        queue = cls.tenants.get(entry.tenant)
        if queue is None:
            queue = cls.tenants[entry.tenant] = _TenantQueue()
        if queue.live == 0:
            queue.start = max(queue.finish, cls.vtime)
        # The counter breaks ties so entries themselves are never compared.
        self._pushes += 1
        heapq.heappush(queue.heap, (entry.arrived, entry.seq, self._pushes, entry))
        if self._aging is not None:
            heapq.heappush(cls.arrivals, (entry.since, self._pushes, entry))
        queue.live += 1
        cls.live += 1
        entry.live = True

    def peek(self) -> Entry[T] | None:
        chosen = self._choose()
        return None if chosen is None else chosen[2]

    def pop(self) -> Entry[T] | None:
        chosen = self._choose()
        if chosen is None:
            return None
        cls, queue, entry = chosen
        heapq.heappop(queue.heap)
        self._forget(cls, queue, entry)
        cls.vtime = max(cls.vtime, queue.start)
        queue.finish = queue.start + entry.cost / self.weight(entry.tenant)
        queue.start = queue.finish
        return entry

    def remove(self, entry: Entry[T]) -> bool:
        """Take a waiting entry out (cancelled, timed out). It was never served, so its
        tenant is not charged. False if it was not waiting."""
        if not entry.live:
            return False
        cls = self._classes[entry.priority]
        self._forget(cls, cls.tenants[entry.tenant], entry)
        return True

    def charge(self, tenant: str, priority: Priority, extra_cost: float) -> None:
        """Correct a served request's cost once its real size is known (may be negative)."""
        queue = self._classes[priority].tenants.get(tenant)
        if queue is None:
            return
        shift = extra_cost / self.weight(tenant)
        queue.finish += shift
        if queue.live:
            queue.start += shift

    def entries(self) -> Iterator[Entry[T]]:
        for cls in self._classes.values():
            for queue in cls.tenants.values():
                yield from (e for *_, e in queue.heap if e.live)

    def _forget(self, cls: _Class[T], queue: _TenantQueue[T], entry: Entry[T]) -> None:
        entry.live = False
        queue.live -= 1
        cls.live -= 1

    def _order(self) -> tuple[Priority, ...]:
        """The classes in the order they are served now."""
        if self._aging is None:
            return PRIORITIES
        interactive = self._classes["interactive"].oldest()
        batch = self._classes["batch"].oldest()
        if interactive is not None and batch is not None and batch + self._aging <= interactive:
            return ("batch", "interactive")
        return PRIORITIES

    def _choose(self) -> tuple[_Class[T], _TenantQueue[T], Entry[T]] | None:
        for priority in self._order():
            cls = self._classes[priority]
            if not cls.live:
                continue
            best: tuple[float, float, int, _TenantQueue[T], Entry[T]] | None = None
            idle: list[str] = []
            for tenant, queue in cls.tenants.items():
                if not queue.live:
                    # An idle tenant at or behind the virtual time would restart there anyway.
                    if queue.finish <= cls.vtime:
                        idle.append(tenant)
                    continue
                head = queue.head()
                if head is not None and (
                    best is None
                    or (queue.start, head.arrived, head.seq) < (best[0], best[1], best[2])
                ):
                    best = (queue.start, head.arrived, head.seq, queue, head)
            for tenant in idle:
                del cls.tenants[tenant]
            if best is not None:
                return cls, best[3], best[4]
        return None
