"""The census of a process's workers: slots used and free, leases held (not those lost or
handed over), and sessions by state, `starting` for one claimed and not yet in its turn."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from tether.telemetry.census import STATES, census


@dataclass
class Folded:
    state: str


@dataclass
class Log:
    folder: Folded
    lease: object | None = "lease"


@dataclass
class Turn:
    log: Log
    writes_nothing: bool = False


@dataclass
class Runs:
    turns: dict[str, Turn] = field(default_factory=dict)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.turns))

    def turn(self, session_id: str) -> Turn | None:
        return self.turns.get(session_id)


@dataclass
class Worker:
    concurrency: int
    running: int
    runs: Runs


def test_leases_lost_or_handed_over_are_not_held_and_claimed_sessions_are_starting() -> None:
    busy = Worker(
        4,
        3,
        Runs(
            {
                "a": Turn(Log(Folded("waiting_tool"))),
                "b": Turn(Log(Folded("waiting_model")), writes_nothing=True),  # lease lost
            }
        ),
    )
    idle = Worker(2, 0, Runs())
    now = census([busy, idle])
    assert (now.slots, now.used, now.leases) == (6, 3, 2)  # "a" and the starting one
    assert now.states["waiting_tool"] == now.states["waiting_model"] == 1
    assert now.states["starting"] == 1
    assert set(now.states) == set(STATES)  # every state reported, most of them at 0
    assert sum(now.states.values()) == now.used
