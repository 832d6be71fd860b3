"""A forked session's worker is SIGKILLed right after the fork (it claimed the child and died
before running anything of it) and again in the middle of the child's turn (after a commit
of its own: its first, the answer asking for a write, each call's start, its last; or inside
a tool call, before or after the effect); a fresh worker finishes the child each time.

The parent was started through the runtime and ran three turns of read, idempotent and
write calls whose effects went to a ledger outside the log. The child is forked through the
runtime (`LocalRuntime.fork`: its own `metadata.runner`, which the workers rebuild it from,
and its mark) at the end of turn 2 with a message of its own, and runs turn 3's script again
as its own turn. Then the finished child is forked in turn, and that fork killed the same
ways. And the process making a fork is killed right after the fork is stored, before it is
marked runnable: the caller's retry with its idempotency key marks the same child.

Afterwards: every earlier session's effects in the ledger are exactly what they were before
the fork (nothing of the parent ran again) and its log is unchanged; each of the fork's
writes happened at most once (one cut off by a kill is answered `unknown_effect`, never
repeated); the fork's log keeps the log invariants, every call answered, and up to the fork
point it is its parent's, event for event (`forking.check`).

All runs start together in a thread pool, each from a copy of one parent's SQLite file
(most of their time is waiting out a dead worker's one-second lease), and each test checks
its share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from invariants import assert_log_invariants
from tether.events import ToolStarted
from tether.fold import Folder
from tether.session.fork import ForkPoint

from . import kit
from .forking import (
    KILLED,
    ON_CLAIM,
    Base,
    Run,
    World,
    assert_claimed_and_killed,
    assert_killed_in_call,
    check,
    run_fork,
    run_parent,
)
from .support import Proc, crashed_write_calls, run_worker

CHILD_AT = ForkPoint(after_turn=2)
GRANDCHILD_AT = ForkPoint(after_turn=3)  # the end of the child's own turn
# The child's calls (turn 3 of the script): a write, then a read and an idempotent one.
IN_CHILD = ["call_6_0:before", "call_6_0:after", "call_7_1:before", "call_7_1:after"]
# The grandchild's (turn 4): a write, then an idempotent call.
IN_GRANDCHILD = ["call_9_0:after", "call_10_0:after"]
FORK_KEY = "fork-once"


@dataclass
class Runs:
    parent: Base
    child: Run  # crash-free: the reference of the child's runs and the grandchildren's base
    grandchild: Run  # crash-free
    children: dict[str, Future[Run]]  # by where the second worker died ("": no second)
    grandchildren: dict[str, Future[Run]]
    unmarked: Future[tuple[Proc, list[str], Run]]  # see `fork_made_by_a_dead_process`


def kill_points(child: Run) -> list[int]:
    """The child's commits its second worker is killed after: its first (nothing asked yet),
    the answer asking for the write (not started), each call's start (not run), and its last
    (the turn's end: nothing left to do)."""
    own = child.outcome().events
    starts = [e.seq for e in own if isinstance(e.payload, ToolStarted)]
    return [own[0].seq, own[1].seq, *starts, own[-1].seq]


def fork_made_by_a_dead_process(parent: Base, world: World) -> tuple[Proc, list[str], Run]:
    """A process forks `parent` through the runtime with an idempotency key and is killed
    as soon as the fork is stored; what the store marks runnable then; and the fork the
    caller's retry with the same key gets, run by workers (the first killed on its claim)."""
    env = {"CRASH_AFTER_FORK": "1", "FORK_KEY": FORK_KEY, "FORK_AFTER_TURN": "2"}
    forker = run_worker(
        world.url, "runtime", "fork", parent.session_id, env=env, effects=world.directory
    )
    marked = world.runnable()
    return forker, marked, run_fork(parent, world, CHILD_AT, [ON_CLAIM], key=FORK_KEY)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    tmp = tmp_path_factory.mktemp("fork-crash")
    parent = run_parent(World.sqlite(tmp / "parent"))
    child = run_fork(parent, parent.world.copy(tmp / "child"), CHILD_AT, [])
    grandchild = run_fork(child.as_base(), child.world.copy(tmp / "grandchild"), GRANDCHILD_AT, [])
    # Where the child's second worker dies: after some commits of its own, inside calls.
    mid_child = {f"seq{n}": {"CRASH_AT_SEQ": str(n)} for n in kill_points(child)}
    mid_child |= {spec: {kit.CRASH_CALL_ENV: spec} for spec in IN_CHILD}
    mid_grandchild = {spec: {kit.CRASH_CALL_ENV: spec} for spec in IN_GRANDCHILD}
    with ThreadPoolExecutor(max_workers=4) as pool:

        def forks(
            of: Base, name: str, at: ForkPoint, mid: dict[str, dict[str, str]]
        ) -> dict[str, Future[Run]]:
            """A fork killed once right after the fork, then one per place in `mid` killed
            there again, each in a copy of `of`'s world."""
            out = {
                "": pool.submit(run_fork, of, of.world.copy(tmp / f"{name}-claim"), at, [ON_CLAIM])
            }
            for key, env in mid.items():
                world = of.world.copy(tmp / f"{name}-{key.replace(':', '-')}")
                out[key] = pool.submit(run_fork, of, world, at, [ON_CLAIM, env])
            return out

        yield Runs(
            parent,
            child,
            grandchild,
            forks(parent, "child", CHILD_AT, mid_child),
            forks(child.as_base(), "grandchild", GRANDCHILD_AT, mid_grandchild),
            pool.submit(fork_made_by_a_dead_process, parent, parent.world.copy(tmp / "unmarked")),
        )
        pool.shutdown(cancel_futures=True)


def test_the_parent_ran_three_turns_through_the_runtime_each_effect_once(runs: Runs) -> None:
    parent = runs.parent
    assert_log_invariants(parent.events)
    folder = Folder().apply_all(parent.events)
    assert (folder.state, folder.turns, folder.last_output) == ("idle", 3, kit.turn_answer(3))
    ledger = parent.world.effects()
    assert {line[0] for lines in ledger.values() for line in lines} == {parent.session_id}
    assert sorted(line[3] for line in ledger["write"]) == ["one", "three", "two"]
    assert len(ledger["idempotent"]) == len(ledger["read"]) == 3


def test_a_fork_run_without_crashes_runs_only_its_own_turn(runs: Runs) -> None:
    for run, turn, writes in ((runs.child, 3, ["three"]), (runs.grandchild, 4, ["four"])):
        assert [p.returncode for p in run.procs] == [0]
        check(run, run, turn)
        assert [line[2] for line in run.outcome().effects["write"]] == writes
    # The child's turn asks for the calls of the parent's turn 3 (the script is the same),
    # with the same ids: the ledger tells them apart by session, and has each once.
    three = [line[:2] for line in runs.child.effects["write"] if line[3] == "three"]
    assert three == [[runs.parent.session_id, "call_6_0"], [runs.child.session_id, "call_6_0"]]


def test_a_worker_killed_right_after_the_fork_leaves_the_child_to_the_next(runs: Runs) -> None:
    run = runs.children[""].result()
    assert_claimed_and_killed(run)
    assert [p.returncode for p in run.procs[1:]] == [0]
    check(run, runs.child, 3)
    assert not crashed_write_calls(run.events)


def test_a_kill_after_commits_of_the_childs_turn_runs_nothing_of_the_parent(
    runs: Runs,
) -> None:
    killed_at = [key for key in runs.children if key.startswith("seq")]
    assert len(killed_at) == 6, killed_at
    for key in killed_at:
        run = runs.children[key].result()
        try:
            assert_claimed_and_killed(run)
            second = run.procs[1]
            assert second.returncode == KILLED, second.stderr[-2000:]
            assert second.committed[-1][0] == int(key.removeprefix("seq"))
            check(run, runs.child, 3)
        except AssertionError as exc:
            raise AssertionError(f"killed after the claim, then after {key}: {exc}") from exc


@pytest.mark.parametrize("spec", IN_CHILD)
def test_a_kill_inside_a_call_of_the_childs_turn_never_repeats_a_write(
    runs: Runs, spec: str
) -> None:
    run = runs.children[spec].result()
    assert_claimed_and_killed(run)
    assert_killed_in_call(run, spec)
    check(run, runs.child, 3)


def test_a_fork_of_a_fork_killed_right_after_its_fork_resumes_alone(runs: Runs) -> None:
    run = runs.grandchildren[""].result()
    assert_claimed_and_killed(run)
    check(run, runs.grandchild, 4)
    # Its prefix runs through the child into the parent, as one log.
    at = runs.child.forked.at
    assert run.events[:at] == [
        dataclasses.replace(e, session_id=run.session_id) for e in runs.parent.events[:at]
    ]


@pytest.mark.parametrize("spec", IN_GRANDCHILD)
def test_a_fork_of_a_fork_killed_inside_a_call_never_repeats_a_write(runs: Runs, spec: str) -> None:
    run = runs.grandchildren[spec].result()
    assert_claimed_and_killed(run)
    assert_killed_in_call(run, spec)
    check(run, runs.grandchild, 4)


def test_a_fork_whose_maker_died_before_marking_it_runs_once_the_caller_retries(
    runs: Runs,
) -> None:
    forker, marked, run = runs.unmarked.result()
    assert forker.returncode == KILLED, forker.stderr[-2000:]
    # Stored, but marked for no worker: until the retry, nothing would run it.
    assert forker.last("forked")["forked"] == run.session_id
    assert marked == []
    assert_claimed_and_killed(run)
    check(run, runs.child, 3)
