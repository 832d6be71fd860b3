"""A review (two critics in parallel threads, then the proposer, for two rounds) is SIGKILLed
right after every event it commits, and a fresh process resumes it each time. Afterwards
the review has converged with the crash-free run's ledger and artifact, the log keeps its
invariants with nothing lost, each participant's thread finished once, and no thread whose
answer was committed before the kill asked its model again."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

from invariants import assert_log_invariants
from tether.events import (
    Event,
    ModelRequested,
    ModelResponded,
    ThreadFinished,
    ThreadStarted,
    UserMessage,
)
from tether.fold import Folder

from .support import TIMEOUT, Outcome, Proc, assert_nothing_lost, env_for, parse_facts, read_session

KILLED = -signal.SIGKILL
REVIEW_WORKER = Path(__file__).resolve().parent.parent / "review" / "worker.py"


@dataclass
class Run:
    procs: list[Proc]
    events: list[Event]
    calls: Counter[tuple[str, str]]  # (pid, digest of the task) -> model calls

    @property
    def result(self) -> dict[str, object]:
        found: dict[str, object] = self.procs[-1].last("result")["result"]
        return found


def run_review(directory: Path, crash_at: int | None) -> Run:
    """Start a review (killed after committing seq `crash_at`), then resume it in fresh
    processes until its turn has ended."""
    directory.mkdir(parents=True)
    db, calls = directory / "tether.db", directory / "calls.log"

    def worker(*args: str, extra: dict[str, str]) -> Proc:
        env = env_for(directory, {"REVIEW_CALLS": str(calls), **extra})
        out = subprocess.run(
            [sys.executable, str(REVIEW_WORKER), str(db), *args],
            env=env, capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip
        return Proc(list(args), out.returncode, parse_facts(out.stdout), out.stderr)

    procs = [worker("start", extra={"CRASH_AT_SEQ": str(crash_at)} if crash_at else {})]
    session_id, events = read_session(db)
    # A process killed after the last commit leaves nothing to do: the next one reads the
    # ended review back.
    while Folder().apply_all(events).turn_open or procs[-1].returncode != 0:
        assert len(procs) < 10, "the review's turn is still open after 10 processes"
        procs.append(worker("resume", session_id, extra={}))
        _, events = read_session(db, session_id)
    lines = calls.read_text().splitlines() if calls.exists() else []
    return Run(procs, events, Counter(tuple(line.split()) for line in lines))  # type: ignore[misc]


@dataclass
class Runs:
    reference: Run
    at_seq: dict[int, Future[Run]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    base = tmp_path_factory.mktemp("review-crash")
    reference = run_review(base / "reference", None)
    with ThreadPoolExecutor(max_workers=4) as pool:
        at_seq = {
            n: pool.submit(run_review, base / f"seq{n}", n) for n in kill_points(reference.events)
        }
        yield Runs(reference, at_seq)
        pool.shutdown(cancel_futures=True)


# Events a batch holds after its first: a kill between two events of one batch leaves the
# store as a kill after its last does, so only batch ends are kill points.
IN_BATCH = frozenset(
    {"user.message", "tool.started", "thread.started", "turn.ended", "session.ended"}
)


def kill_points(events: list[Event]) -> list[int]:
    """The end of every batch of the first round (its critics' parallel threads, then the
    proposer's, and the chair's answer that opens round 2), and the last commit of the
    review: round 2 commits the same kinds of batches again."""
    round_two = next(e.seq for e in events if e.thread == "stubborn-4")
    ends = [e.seq for e, after in pairwise(events) if after.type not in IN_BATCH]
    return [n for n in ends if n <= round_two] + [len(events)]


def threads_of(events: list[Event]) -> list[str]:
    return [e.thread for e in events if isinstance(e.payload, ThreadStarted)]


def task_digests(events: list[Event]) -> dict[str, str]:
    """Each thread's task, by the digest its participant's model records."""
    from review.participants import digest

    return {
        e.thread: digest(e.payload.message.text)
        for e in events
        if e.thread and isinstance(e.payload, UserMessage)
    }


def first_seq(events: list[Event], thread: str, kind: type) -> int:
    return next(e.seq for e in events if e.thread == thread and isinstance(e.payload, kind))


def test_the_crash_free_review_converges_in_two_rounds(runs: Runs) -> None:
    ref = runs.reference
    assert [p.returncode for p in ref.procs] == [0], ref.procs[0].stderr[-2000:]
    assert_log_invariants(ref.events)
    assert ref.result["stop_reason"] == "converged"
    assert ref.result["rounds"] == 2
    assert threads_of(ref.events) == [
        "stubborn-1", "wordy-2", "writer-3", "stubborn-4", "wordy-5", "writer-6",
    ]  # fmt: skip
    # One model call per thread, all by the one process.
    assert sorted(ref.calls.values()) == [1] * 6


def test_a_review_killed_after_any_commit_resumes_without_running_a_finished_thread_again(
    runs: Runs,
) -> None:
    ref = runs.reference
    mid_round = 0  # kills with one thread answered and another not
    for n, future in runs.at_seq.items():
        run = future.result()
        first = run.procs[0]
        try:
            assert first.returncode == KILLED, first.stderr[-2000:]
            assert first.committed[-1][0] == n, f"died after {first.committed[-1][0]}"
            assert all(p.returncode == 0 for p in run.procs[1:]), [
                (p.returncode, p.stderr[-2000:]) for p in run.procs
            ]
            assert_log_invariants(run.events)
            assert_nothing_lost(Outcome(run.procs, run.events))
            # The same review as without the crash.
            for key in ("stop_reason", "rounds", "ledger", "artifact", "headline", "critics"):
                assert run.result[key] == ref.result[key], key
            assert threads_of(run.events) == threads_of(ref.events)
            finished = Counter(
                e.thread for e in run.events if isinstance(e.payload, ThreadFinished)
            )
            assert finished == Counter(threads_of(ref.events))
            # A thread whose answer was committed before the kill never called its model
            # again; one whose request was open may have been asked twice, no more.
            killed_pid = str(first.last("prefix")["pid"])
            by_digest: Counter[str] = Counter()
            for (_, d), count in run.calls.items():
                by_digest[d] += count
            answered = {
                thread: first_seq(run.events, thread, ModelResponded) <= n
                for thread in threads_of(run.events)
            }
            mid_round += len(set(answered.values())) == 2
            for thread, d in task_digests(run.events).items():
                if answered[thread]:
                    assert by_digest[d] == 1, (thread, by_digest[d])
                    assert run.calls[(killed_pid, d)] == 1, f"{thread} was answered by another"
                elif first_seq(run.events, thread, ModelRequested) <= n:
                    assert by_digest[d] <= 2, (thread, by_digest[d])
                else:
                    assert by_digest[d] == 1, (thread, by_digest[d])
        except AssertionError as exc:
            raise AssertionError(f"killed after seq {n}: {exc}") from exc
    assert mid_round > 10, mid_round
