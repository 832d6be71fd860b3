"""Deterministic simulation: for hundreds of seeds, a seeded schedule runs one session through
attempts that each may be cut short. A cut is a cancel of the runner after its k-th await
point (the caller cancels the run, `interrupt`, `cancel`, or the same from another process),
or a crash at its k-th append, before or after the store took the batch, after which that
"process" does nothing more and a fresh Agent with a fresh fold resumes once its lease has
expired on the store's virtual clock. Every seed checks the same invariants.

In-process on the memory store, whose methods never yield: the only await points are the
scripted model's and tools' `sleep(0)`s and the runtime's own, so a seed replays exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from invariants import assert_log_invariants, payloads
from tether import Agent, ToolContext, tool
from tether.errors import LeaseHeld, UsageError
from tether.events import Event, SessionEnded, ToolFinished, ToolStarted, TurnEnded
from tether.fold import Folder, Transcript
from tether.recovery import UNKNOWN_EFFECT
from tether.session.control import decide, request_stop, send_message
from tether.store import MemoryStore
from tether.store.base import Lease, Store
from tether.testing import Delay, ScriptedModel, call
from tether.tools import Tool

SEEDS = 400
TTL = 30.0
MAX_ATTEMPTS = 8
TASK = "Read note a, set flag x, journal hello, then pay 5."
CUTS = ("cancel_run", "interrupt", "cancel", "remote_interrupt", "remote_cancel")
ACTIONS = ("run", "crash", "crash", *CUTS)
STOP_REASONS = {"end_turn", "interrupted", "awaiting_approval"}


class Crash(BaseException):
    """The simulated process died here: nothing of it runs any more."""


class VirtualClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


class DyingStore:
    """One process's view of the shared store: at its `crash_at`-th append it dies, before
    or after the batch lands, and from then on every call raises `Crash`. Its appends take
    a seeded number of yields to commit, as SQLite's group commit does."""

    def __init__(
        self, inner: MemoryStore, rng: random.Random, crash_at: int = 0, after: bool = False
    ) -> None:
        self.inner = inner
        self.rng = rng
        self.url = inner.url
        self.crash_at = crash_at
        self.after = after
        self.appends = 0
        self.dead = False
        self.claimed = False  # whether this process ever held the session's lease

    async def append(
        self,
        session_id: str,
        events: Sequence[Event],
        expected_seq: int,
        lease: Lease | None = None,
        **catalog: Any,  # the row and the admission, passed on as they came
    ) -> None:
        self._alive()
        self.appends += 1
        dies_here = self.appends == self.crash_at
        if dies_here and not self.after:
            self._die()
        await self.inner.append(session_id, events, expected_seq, lease, **catalog)
        for _ in range(self.rng.choice((0, 0, 1, 2))):
            await asyncio.sleep(0)  # committed; the writer hears of it a moment later
            self._alive()
        if dies_here:
            self._die()

    def _die(self) -> None:
        self.dead = True
        raise Crash(f"crashed at append {self.appends}")

    def _alive(self) -> None:
        if self.dead:
            raise Crash("a dead process does nothing")

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(method):
            return method  # not a call to the store (e.g. `subscribe`: nothing is pushed)

        async def guarded(*args: Any, **kwargs: Any) -> Any:
            self._alive()
            result = await method(*args, **kwargs)
            if name == "claim" and not str(args[1]).startswith("control:"):
                self.claimed = True  # the run's own claim, not a closer's
            return result

        return guarded


class RemoteStore:
    """The shared store as another process reaches it: every call takes a moment (a seeded
    number of yields), so its checks and appends interleave with the runner's."""

    def __init__(self, inner: MemoryStore, rng: random.Random) -> None:
        self.inner = inner
        self.url = inner.url
        self.rng = rng

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(method):
            return method

        async def remote(*args: Any, **kwargs: Any) -> Any:
            for _ in range(self.rng.randint(0, 4)):
                await asyncio.sleep(0)
            return await method(*args, **kwargs)

        return remote


class World:
    """The outside world the tools touch: every execution, with its call id and key."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str, str]] = []  # (tool, call id, idempotency key)

    def tools(self) -> list[Tool]:
        async def effect(name: str, ctx: ToolContext) -> None:
            await asyncio.sleep(0)
            self.runs.append((name, ctx.call_id, ctx.idempotency_key))
            await asyncio.sleep(0)

        @tool(effect="read")
        async def read_note(name: str, ctx: ToolContext) -> str:
            """Read a note."""
            await effect("read_note", ctx)
            return f"note {name}: milk"

        @tool(effect="idempotent")
        async def set_flag(key: str, value: int, ctx: ToolContext) -> str:
            """Set a flag."""
            await effect("set_flag", ctx)
            return f"flag {key}={value}"

        @tool
        async def append_line(text: str, ctx: ToolContext) -> str:
            """Journal a line."""
            await effect("append_line", ctx)
            return f"appended {text}"

        @tool(needs_approval=True)
        async def transfer(amount: int, ctx: ToolContext) -> str:
            """Pay."""
            await effect("transfer", ctx)
            return f"paid {amount}"

        return [read_note, set_flag, append_line, transfer]


def model() -> ScriptedModel:
    return ScriptedModel(
        [
            Delay(0, call("read_note", name="a")),
            Delay(0, [call("set_flag", key="x", value=1), call("append_line", text="hello")]),
            Delay(0, call("transfer", amount=5)),
            Delay(0, "all done"),
        ],
        repeat_last=True,
    )


@dataclass
class Attempt:
    action: str
    first_seq: int  # the attempt's events are first_seq..last_seq
    last_seq: int = 0
    crashed: bool = False
    claimed: bool = False


@dataclass
class Episode:
    seed: int
    events: list[Event]
    world: World
    attempts: list[Attempt] = field(default_factory=list)
    decisions: list[bool] = field(default_factory=list)
    crash_only: bool = False


class Sim:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = VirtualClock()
        self.base = MemoryStore(clock=self.clock.time)
        self.world = World()
        self.session_id: str | None = None
        self.attempts: list[Attempt] = []
        self.decisions: list[bool] = []

    async def folder(self) -> Folder:
        assert self.session_id is not None
        return Folder().apply_all(await self.base.read(self.session_id))

    async def find_session(self) -> str | None:
        if self.session_id is None:
            infos = await self.base.sessions()
            self.session_id = infos[0].session_id if infos else None
        return self.session_id

    def agent(self, store: DyingStore | MemoryStore) -> Agent:
        # The watcher never ticks: leases expire on the virtual clock, and other
        # processes' appends are folded in at the runner's next commit.
        return Agent(
            model(),
            tools=self.world.tools(),
            store=cast(Store, store),
            lease_ttl=TTL,
            watch_interval=3600,
        )

    async def attempt(self, action: str, task: str | None) -> Attempt:
        last = (await self.folder()).last_seq if self.session_id else 0
        record = Attempt(action, last + 1)
        crash_at = self.rng.randint(1, 6) if action == "crash" else 0
        store = DyingStore(self.base, self.rng, crash_at, after=self.rng.random() < 0.5)
        agent = self.agent(store)
        runner = asyncio.create_task(agent.run(task, session_id=self.session_id))
        try:
            if action in CUTS:
                await self.cut(action, agent, runner)
        except Crash:
            record.crashed = True
        (result,) = await asyncio.gather(runner, return_exceptions=True)
        record.crashed = record.crashed or isinstance(result, Crash)
        record.claimed = store.claimed
        if isinstance(result, UsageError) and (await self.folder()).terminal:
            pass  # a cancel from elsewhere ended the session before this run began
        elif isinstance(result, LeaseHeld):
            pass  # another process (closing it for a cancel) held the session just then
        elif isinstance(result, Exception):
            raise result  # the runtime itself failed: never expected
        with contextlib.suppress(Crash):  # a dead process's close fails too; its watcher is gone
            await agent.close()
        if record.crashed:
            self.clock.now += TTL + 1  # the dead process's lease runs out
        await self.find_session()
        record.last_seq = (await self.folder()).last_seq if self.session_id else 0
        self.attempts.append(record)
        return record

    async def cut(self, action: str, agent: Agent, runner: asyncio.Task[Any]) -> None:
        for _ in range(self.rng.randint(0, 40)):
            if runner.done():
                break
            await asyncio.sleep(0)
        session_id = await self.find_session()
        if action == "cancel_run" or session_id is None:
            runner.cancel()
        elif action == "interrupt":
            await agent.interrupt(session_id)
        elif action == "cancel":
            await agent.cancel(session_id)
        else:  # another process asks; the runner folds it in at its next commit
            scope = "turn" if action == "remote_interrupt" else "session"
            await request_stop(cast(Store, RemoteStore(self.base, self.rng)), session_id, scope)

    async def step(self, crash_only: bool) -> bool:
        """One attempt, chosen by the seed. False when the episode is over."""
        task: str | None = TASK
        if self.session_id is not None:
            folder = await self.folder()
            if folder.terminal:
                return False
            task = None
            if folder.pending_approvals:
                allow = self.rng.random() < 0.6
                self.decisions.append(allow)
                await decide(
                    self.base, self.session_id, folder.pending_approvals[0], allow, "not today"
                )
            elif not folder.turn_open and folder.state != "canceling":
                if crash_only or self.rng.random() < 0.5:
                    return False
                await send_message(self.base, self.session_id, "and once more")
        actions = ("run", "crash") if crash_only else ACTIONS
        record = await self.attempt(self.rng.choice(actions), task)
        if not record.crashed and self.session_id is not None:
            await self.check_attempt(record)
        return True

    async def check_attempt(self, record: Attempt) -> None:
        """Only a crash leaves work undone: any other attempt that took the session closed
        its turn, and every stop it was asked for was acted on."""
        folder = await self.folder()
        where = f"seed {self.seed}, attempt {len(self.attempts)} ({record.action})"
        # A run cancelled before it took the lease did nothing, and leaves nothing undone.
        assert not folder.turn_open or not record.claimed, f"{where}: the turn was left open"
        assert folder.state != "canceling", f"{where}: a stop request was left unanswered"
        if record.action in ("cancel", "remote_cancel"):
            assert folder.state == "canceled", f"{where}: cancel left the session {folder.state}"

    async def finish(self) -> None:
        """After the schedule: plain resumes (allowing what waits) until nothing is open."""
        for _ in range(10):
            folder = await self.folder()
            if folder.terminal or not (
                folder.turn_open or folder.pending_approvals or folder.state == "canceling"
            ):
                return
            if folder.pending_approvals:
                self.decisions.append(True)
                await decide(self.base, self.session_id or "", folder.pending_approvals[0], True)
            await self.attempt("run", None)
        raise AssertionError(f"seed {self.seed}: the session never reached a named end")


async def run_episode(seed: int) -> Episode:
    sim = Sim(seed)
    crash_only = sim.rng.random() < 0.4
    for _ in range(MAX_ATTEMPTS):
        if not await sim.step(crash_only):
            break
    if sim.session_id is None:  # cut before the session was created: start it cleanly
        await sim.attempt("run", TASK)
    await sim.finish()
    assert sim.session_id is not None
    events = await sim.base.read(sim.session_id)
    return Episode(seed, events, sim.world, sim.attempts, sim.decisions, crash_only)


# -- checks --------------------------------------------------------------------------------


def attempt_of(episode: Episode, seq: int) -> Attempt:
    return next(a for a in episode.attempts if a.first_seq <= seq <= a.last_seq)


def check_episode(episode: Episode) -> None:
    events = episode.events
    assert_log_invariants(events)
    folder = Folder().apply_all(events)
    assert folder.state in ("idle", "canceled"), folder.state
    reasons = {p.stop_reason for p in payloads(events, TurnEnded)}
    assert reasons <= STOP_REASONS, reasons
    assert len(payloads(events, SessionEnded)) == (1 if folder.state == "canceled" else 0)
    check_effects(episode)


def check_effects(episode: Episode) -> None:
    """Writes at most once (exactly once when answered ok); idempotent runs carry their call
    id as key; `unknown_effect` only for a write started by an attempt that crashed."""
    finished = {
        p.call_id: (p.outcome, e.seq)
        for e in episode.events
        if isinstance(p := e.payload, ToolFinished)
    }
    started = {
        p.call_id: (p.effect, e.seq)
        for e in episode.events
        if isinstance(p := e.payload, ToolStarted)
    }
    runs = Counter((name, call_id) for name, call_id, _ in episode.world.runs)
    for (name, call_id), n in runs.items():
        if name in ("append_line", "transfer"):
            assert n <= 1, f"{name} {call_id} ran {n} times"
            if finished[call_id][0] == "ok":
                assert n == 1
    for name, call_id, key in episode.world.runs:
        assert key == call_id, f"{name} {call_id} ran with key {key}"
    for call_id, (outcome, _) in finished.items():
        if outcome == "unknown_effect":
            effect, seq = started[call_id]
            assert effect == "write" and attempt_of(episode, seq).crashed, call_id
        if outcome == "denied":
            assert ("transfer", call_id) not in runs


def transcript_of(events: Sequence[Event]) -> Transcript:
    return Folder().apply_all(events).transcript()


async def reference(decisions: tuple[bool, ...]) -> Transcript:
    """The crash-free run with the same approval decisions."""
    sim = Sim(-1)
    await sim.attempt("run", TASK)
    for allow in decisions:
        folder = await sim.folder()
        assert sim.session_id is not None and folder.pending_approvals
        await decide(sim.base, sim.session_id, folder.pending_approvals[0], allow, "not today")
        await sim.attempt("run", None)
    assert sim.session_id is not None
    return transcript_of(await sim.base.read(sim.session_id))


def check_against_reference(episode: Episode, ref: Transcript) -> None:
    got = transcript_of(episode.events)
    unknown = {
        p.call_id for p in payloads(episode.events, ToolFinished) if p.outcome == "unknown_effect"
    }
    assert len(got.messages) == len(ref.messages)
    for want, have in zip(ref.messages, got.messages, strict=True):
        if want.role != "tool":
            assert have == want
            continue
        for w, h in zip(want.tool_results, have.tool_results, strict=True):
            assert h == w or (h.call_id in unknown and h.content == UNKNOWN_EFFECT), (h, w)


# -- the tests -----------------------------------------------------------------------------


async def test_every_seeded_schedule_of_cancels_and_crashes_keeps_the_invariants() -> None:
    references: dict[tuple[bool, ...], Transcript] = {}
    seen: Counter[str] = Counter()
    for seed in range(SEEDS):
        try:
            episode = await run_episode(seed)
            check_episode(episode)
            if episode.crash_only:
                key = tuple(episode.decisions)
                if key not in references:
                    references[key] = await reference(key)
                check_against_reference(episode, references[key])
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}") from exc
        seen.update(a.action + ("/crashed" if a.crashed else "") for a in episode.attempts)
        seen.update(p.outcome for p in payloads(episode.events, ToolFinished))
    # The schedules reached what they are meant to: every kind of cut, crashes, and the
    # answers that only crashes and cancels produce.
    for kind in (*CUTS, "crash/crashed", "unknown_effect", "canceled", "denied"):
        assert seen[kind] > 0, (kind, seen)


@pytest.mark.parametrize("seed", [3, 17, 101])
async def test_a_seed_replays_the_same_log(seed: int) -> None:
    first, second = await run_episode(seed), await run_episode(seed)
    assert [(e.seq, e.type) for e in first.events] == [(e.seq, e.type) for e in second.events]
    assert [(a.action, a.crashed) for a in first.attempts] == [
        (a.action, a.crashed) for a in second.attempts
    ]


class HeldRelease:
    """The worker's store, whose release of the lease waits for `gate`: the worker has
    ended its turn and is about to leave."""

    def __init__(self, inner: MemoryStore, gate: asyncio.Event) -> None:
        self.inner = inner
        self.url = inner.url
        self.gate = gate

    async def release(self, lease: Lease) -> None:
        await self.gate.wait()
        await self.inner.release(lease)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class LateStore:
    """Another process whose append of a stop request reaches the store only once the
    worker it saw holding the session has released it and finished its run."""

    def __init__(self, inner: MemoryStore, worker: asyncio.Task[Any], gate: asyncio.Event) -> None:
        self.inner = inner
        self.url = inner.url
        self.worker = worker
        self.gate = gate

    async def append(
        self,
        session_id: str,
        events: Sequence[Event],
        expected_seq: int,
        lease: Lease | None = None,
        **catalog: Any,  # the row and the admission, passed on as they came
    ) -> None:
        self.gate.set()
        await asyncio.gather(self.worker, return_exceptions=True)
        await self.inner.append(session_id, events, expected_seq, lease, **catalog)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_cancel_asked_of_a_worker_that_is_leaving_is_carried_out_by_the_asker() -> None:
    # The schedule the seeds rarely hit: the asker sees the worker's lease after the turn
    # ended, the worker releases the session and takes its last look, and only then does
    # the request land. Nobody would act on it unless the asker looks again.
    base = MemoryStore()
    gate = asyncio.Event()
    agent = Agent(
        ScriptedModel(["done"]), store=cast(Store, HeldRelease(base, gate)), watch_interval=3600
    )
    worker = asyncio.create_task(agent.run("answer, then leave"))
    while not worker.done() and not gate.is_set():
        infos = await base.sessions()
        if infos and Folder().apply_all(await base.read(infos[0].session_id)).stop_reason:
            break  # the turn has ended; the worker waits to release its lease
        await asyncio.sleep(0)
    session_id = infos[0].session_id
    assert await base.current_lease(session_id) is not None

    said = await request_stop(cast(Store, LateStore(base, worker, gate)), session_id, "session")

    assert (await worker).stop_reason == "end_turn"
    await agent.close()
    events = await base.read(session_id)
    assert_log_invariants(events)
    assert said == "canceled", said
    assert Folder().apply_all(events).state == "canceled"
    assert [p.outcome for p in payloads(events, SessionEnded)] == ["canceled"]
