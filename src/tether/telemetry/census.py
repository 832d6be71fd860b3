"""What this process's workers hold at one moment, counted when metrics are read: their
slots used and free, the leases they hold, and their sessions by state.

Owns the count and the shape it reads a worker through (structural: telemetry sits below
the runtime and imports none of it); not when workers are registered (`metrics.watch`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, get_args

from tether.state import TERMINAL_STATES, State

# Every state a held session can be in, so each series exists from the first scrape; a
# claimed session not yet in its turn (loading, judged, being settled) is `starting`.
STATES: tuple[str, ...] = (
    "starting",
    *(s for s in get_args(State) if s not in TERMINAL_STATES),
)


class _Folded(Protocol):
    @property
    def state(self) -> str: ...


class _Log(Protocol):
    @property
    def folder(self) -> _Folded: ...
    @property
    def lease(self) -> object | None: ...


class _Turn(Protocol):
    @property
    def log(self) -> _Log: ...
    @property
    def writes_nothing(self) -> bool: ...


class _Runs(Protocol):
    def __iter__(self) -> Iterator[str]: ...
    def turn(self, session_id: str) -> _Turn | None: ...


class WorkerLike(Protocol):
    """`runtime.worker.Worker` as read here."""

    @property
    def concurrency(self) -> int: ...
    @property
    def running(self) -> int: ...
    @property
    def runs(self) -> _Runs: ...


@dataclass
class Census:
    slots: int = 0
    used: int = 0
    leases: int = 0
    states: Counter[str] = field(default_factory=lambda: Counter(dict.fromkeys(STATES, 0)))


def census(workers: Iterable[WorkerLike]) -> Census:
    """Summed over `workers`. A session a worker claimed holds its lease until the worker
    lets it go, so the leases are the claimed sessions not yet in a turn and the turns under
    one, less those that lost it or handed it over (they write nothing more)."""
    out = Census()
    for worker in _members(workers):
        out.slots += worker.concurrency
        out.used += worker.running
        turns = [t for sid in worker.runs if (t := worker.runs.turn(sid)) is not None]
        starting = max(0, worker.running - len(turns))
        out.states["starting"] += starting
        out.states.update(t.log.folder.state for t in turns)
        held = sum(1 for t in turns if t.log.lease is not None and not t.writes_nothing)
        out.leases += starting + held
    return out


def _members(workers: Iterable[WorkerLike]) -> list[WorkerLike]:
    """A copy of `workers`. OpenTelemetry's reader counts on its own thread, and a weak set
    that gains or loses a member (a worker made or dropped on the loop's) while it is read
    raises: read again, then give up for this collection."""
    for _ in range(3):
        try:
            return list(workers)
        except RuntimeError:
            continue
    return []
