"""What the crash tests of forks share: a session started through the runtime and run by
worker processes (`worker.py work`), forks of it run by workers killed where a test says,
and the checks a fork must pass after any number of crashes.

A *world* is a store (a SQLite file, or a PostgreSQL URL) and the directory of the ledger
its tools write; the SQLite tests copy one parent's world for each fork, so their runs
share nothing and go in parallel."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import signal
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from invariants import assert_log_invariants, payloads
from tether.events import Event, ModelResponded, SessionForked, ToolStarted
from tether.fold import Folder
from tether.runtime import LocalRuntime
from tether.runtime.base import SessionRef, SessionSpec
from tether.session.fork import Forked, ForkPoint
from tether.store.open import open_store

from . import kit
from .support import (
    Outcome,
    Proc,
    assert_effects,
    assert_nothing_lost,
    assert_outcomes,
    assert_transcript_matches,
    crashed_write_calls,
    effects,
    read_session,
    run_worker,
)

KILLED = -signal.SIGKILL
Effects = dict[str, list[list[str]]]  # kind -> the ledger's lines: SESSION CALL KEY WHAT
ON_CLAIM = {"CRASH_ON_CLAIM": "1"}  # the worker claims the fork and dies: nothing of it ran
MAX_WORKERS = 10  # per fork: a turn still open after this many is a failure


@dataclass(frozen=True)
class World:
    """A store (`url`: a SQLite file's path or a PostgreSQL URL) and its ledger's directory."""

    directory: Path
    url: str

    @staticmethod
    def sqlite(directory: Path) -> World:
        directory.mkdir(parents=True)
        return World(directory, str(directory / "tether.db"))

    def effects(self) -> Effects:
        return effects(self.directory)

    def read(self, session_id: str) -> list[Event]:
        return read_session(self.url, session_id)[1]

    def work(self, session_id: str, env: dict[str, str] | None = None) -> Proc:
        """A runtime's worker process, run until it has ended a turn of `session_id`."""
        return run_worker(self.url, "runtime", "work", session_id, env=env, effects=self.directory)

    def runnable(self) -> list[str]:
        """The sessions marked for the workers."""
        return asyncio.run(_runnable(self.url))

    def copy(self, directory: Path) -> World:
        """A copy of this SQLite world (its file and its ledger) in `directory`."""
        copied = World.sqlite(directory)
        with sqlite3.connect(self.url) as source, sqlite3.connect(copied.url) as target:
            source.backup(target)
        for ledger in self.directory.glob("*.log"):
            shutil.copy(ledger, directory / ledger.name)
        return copied


@dataclass
class Base:
    """A finished session in `world`, the one a fork is made of."""

    world: World
    session_id: str
    events: list[Event]


@dataclass
class Run:
    """A fork of `base`, made in `world`, run until its turn ended by `procs`; the ledger
    before the fork and after the run, and the base's log read again afterwards."""

    base: Base
    world: World
    forked: Forked
    procs: list[Proc]
    events: list[Event]  # the fork's log
    base_after: list[Event]
    effects_before: Effects
    effects: Effects

    @property
    def session_id(self) -> str:
        return self.forked.session_id

    @property
    def workers_from(self) -> int:
        """The first seq a worker wrote: after the fork's own batch (its `session.forked`,
        the answers to open calls, none here, and its message)."""
        return self.forked.at + len(self.forked.answered) + 3

    def outcome(self) -> Outcome:
        """What the workers wrote, and the fork's own effects (the ledger's lines without
        their session), as the crash checks read them."""
        own = {
            kind: [line[1:] for line in lines if line[0] == self.session_id]
            for kind, lines in self.effects.items()
        }
        return Outcome(self.procs, self.events[self.workers_from - 1 :], own)

    def as_base(self) -> Base:
        return Base(self.world, self.session_id, self.events)


async def _runnable(url: str) -> list[str]:
    store = open_store(url)
    try:
        return [w.session_id for w in await store.runnable()]
    finally:
        await store.close()


async def _start(url: str) -> str:
    async with LocalRuntime(url, workers=0) as runtime:
        spec = SessionSpec("python:crash.kit:fork_model", kit.FORK_TASK, ("crash.kit:FORK_TOOLS",))
        return (await runtime.start(spec)).session_id


async def _send(url: str, session_id: str, message: str) -> None:
    async with LocalRuntime(url, workers=0) as runtime:
        await runtime.send(SessionRef(session_id), message)


def run_parent(world: World) -> Base:
    """A session started through the runtime, its three turns run by worker processes."""
    session_id = asyncio.run(_start(world.url))
    procs = [world.work(session_id)]
    for message in kit.FORK_MESSAGES:
        asyncio.run(_send(world.url, session_id, message))
        procs.append(world.work(session_id))
    assert [p.returncode for p in procs] == [0] * len(procs), [p.stderr[-2000:] for p in procs]
    return Base(world, session_id, world.read(session_id))


async def _fork(url: str, parent: str, point: ForkPoint, key: str | None) -> Forked:
    """Fork through the runtime (no workers of its own): the child, its `metadata.runner`,
    and its mark for the workers."""
    async with LocalRuntime(url, workers=0) as runtime:
        return await runtime.fork(
            SessionRef(parent), at=point, message=kit.FORK_MESSAGE, idempotency_key=key
        )


def run_fork(
    base: Base,
    world: World,
    point: ForkPoint,
    kills: Sequence[dict[str, str]],
    key: str | None = None,
) -> Run:
    """Fork `base` at `point` in `world` (where it is, or a copy), with idempotency key `key`
    if given, then run the fork with a worker per entry of `kills` (its env: where it dies),
    then fresh ones until its turn has ended."""
    effects_before = world.effects()
    forked = asyncio.run(_fork(world.url, base.session_id, point, key))
    procs: list[Proc] = []
    events = world.read(forked.session_id)
    while Folder().apply_all(events).turn_open:
        assert len(procs) < MAX_WORKERS, f"the fork's turn is open after {MAX_WORKERS} workers"
        env = kills[len(procs)] if len(procs) < len(kills) else None
        procs.append(world.work(forked.session_id, env))
        events = world.read(forked.session_id)
    base_after = world.read(base.session_id)
    return Run(base, world, forked, procs, events, base_after, effects_before, world.effects())


# -- checks --------------------------------------------------------------------------------


def check(run: Run, reference: Run, turn: int) -> None:
    """What must hold after any crashes of a fork's workers: `reference` is a crash-free run
    of the same fork, `turn` the script's turn the fork runs as its own."""
    base, events, at = run.base, run.events, run.forked.at
    assert all(p.returncode in (0, KILLED) for p in run.procs), [
        (p.args, p.returncode, p.stderr[-2000:]) for p in run.procs
    ]
    # Every session before the fork: its log as it was, its effects in the ledger (the
    # world, not the log) exactly those it had.
    assert run.base_after == base.events
    others = {
        kind: [line for line in lines if line[0] != run.session_id]
        for kind, lines in run.effects.items()
    }
    assert others == run.effects_before
    # The fork's log: the parent's events up to the fork point, then its own.
    assert [dataclasses.replace(e, session_id=base.session_id) for e in events[:at]] == (
        base.events[:at]
    )
    forked = events[at].payload
    assert isinstance(forked, SessionForked)
    assert (forked.parent, forked.parent_seq) == (base.session_id, at)
    assert_log_invariants(events)
    # Nothing of the parent's ran again: every call a worker started is of the fork's own
    # answers.
    own = run.outcome()
    asked = {c.id for p in payloads(own.events, ModelResponded) for c in p.message.tool_calls}
    started = {p.call_id for p in payloads(own.events, ToolStarted)}
    assert started <= asked, f"calls of the parent's started again: {started - asked}"
    assert_nothing_lost(own)
    assert_outcomes(events)
    assert_effects(own)
    folder = Folder().apply_all(events)
    assert (folder.state, folder.stop_reason, folder.last_output) == (
        "idle",
        "end_turn",
        kit.turn_answer(turn),
    )
    assert_transcript_matches(
        Folder().apply_all(reference.events).transcript(),
        folder.transcript(),
        crashed_write_calls(events),
    )


def assert_claimed_and_killed(run: Run) -> None:
    """The first worker took the fork and died before it wrote anything of it."""
    first = run.procs[0]
    assert first.returncode == KILLED, first.stderr[-2000:]
    assert first.last("claimed")["claimed"] == [run.session_id]
    assert first.committed == []


def assert_killed_in_call(run: Run, spec: str) -> None:
    """The second worker died inside a call (`spec`: CALL:before|after its effect): a write
    is answered `unknown_effect` and never run again; a read or idempotent call runs again."""
    assert run.procs[1].returncode == KILLED, run.procs[1].stderr[-2000:]
    call_id, when = spec.split(":")
    own = run.outcome()
    ran = {kind: [line[0] for line in lines].count(call_id) for kind, lines in own.effects.items()}
    effect = next(p.effect for p in payloads(own.events, ToolStarted) if p.call_id == call_id)
    starts = [p.call_id for p in payloads(own.events, ToolStarted)].count(call_id)
    if effect == "write":
        assert call_id in crashed_write_calls(run.events)
        assert (ran["write"], starts) == (1 if when == "after" else 0, 1)
    else:
        assert call_id not in crashed_write_calls(run.events)
        assert (ran[effect], starts) == (2 if when == "after" else 1, 2)
