"""A worker process running a scripted session is killed with SIGKILL at every commit point
and inside its tools; a fresh process resumes each time. Afterwards no event is lost or
repeated, every call is answered once, no write happened twice, and the transcript is the
crash-free one except where a write's outcome is honestly unknown.

All runs start together in a thread pool (most of their time is waiting out the dead
worker's one-second lease), and each test checks its share as it completes.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from invariants import assert_log_invariants, payloads
from tether.events import ToolFinished, ToolStarted

from . import kit
from .support import (
    Outcome,
    assert_effects,
    assert_nothing_lost,
    assert_outcomes,
    assert_transcript_matches,
    crashed_write_calls,
    run_until_turn_ends,
)

KILLED = -signal.SIGKILL
# (call, before or after its effect): read, idempotent and write calls, alone and in the
# parallel turn.
IN_TOOL = [
    "call_0_0:before",
    "call_0_0:after",
    "call_1_0:before",
    "call_1_0:after",
    "call_2_0:before",
    "call_2_0:after",
    "call_3_0:after",
    "call_3_1:after",
    "call_3_2:before",
    "call_3_2:after",
]


@dataclass
class Runs:
    reference: Outcome
    chain: Future[Outcome]
    at_seq: dict[int, Future[Outcome]]
    in_tool: dict[str, Future[Outcome]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    base = tmp_path_factory.mktemp("crash")
    reference = run_until_turn_ends(base / "reference", "crash", {})
    with ThreadPoolExecutor(max_workers=4) as pool:
        chain = pool.submit(
            run_until_turn_ends,
            base / "chain",
            "crash",
            {"CRASH_AFTER_APPENDS": "2"},
            {"CRASH_AFTER_APPENDS": "2"},
        )
        at_seq = {
            n: pool.submit(run_until_turn_ends, base / f"seq{n}", "crash", {"CRASH_AT_SEQ": str(n)})
            for n in range(1, len(reference.events) + 1)
        }
        in_tool = {
            spec: pool.submit(
                run_until_turn_ends,
                base / spec.replace(":", "-"),
                "crash",
                {kit.CRASH_CALL_ENV: spec},
            )
            for spec in IN_TOOL
        }
        yield Runs(reference, chain, at_seq, in_tool)
        pool.shutdown(cancel_futures=True)


def check(outcome: Outcome, reference: Outcome) -> None:
    """What must hold after any crashes: the log's invariants, nothing lost, outcomes and
    effects as the recovery table says, and the crash-free transcript."""
    assert_log_invariants(outcome.events)
    assert_nothing_lost(outcome)
    assert_outcomes(outcome.events)
    assert_effects(outcome)
    folder = outcome.folder()
    assert (folder.state, folder.stop_reason, folder.last_output) == (
        "idle",
        "end_turn",
        kit.FINAL_ANSWER,
    )
    assert all(p.returncode in (0, KILLED) for p in outcome.procs), [
        (p.args, p.returncode, p.stderr[-2000:]) for p in outcome.procs
    ]
    assert_transcript_matches(
        reference.transcript(), outcome.transcript(), crashed_write_calls(outcome.events)
    )


def test_the_crash_free_run_answers_every_call_ok_and_writes_each_line_once(runs: Runs) -> None:
    ref = runs.reference
    assert len(ref.procs) == 1 and ref.procs[0].returncode == 0
    check(ref, ref)
    assert sorted(line[0] for line in ref.effects["write"]) == ["call_2_0", "call_3_2"]
    assert {p.outcome for p in payloads(ref.events, ToolFinished)} == {"ok"}


def test_a_kill_after_every_commit_point_is_resumed_by_a_fresh_process(runs: Runs) -> None:
    unknown_at: dict[int, set[str]] = {}
    for n, future in runs.at_seq.items():
        outcome = future.result()
        first = outcome.procs[0]
        assert first.returncode == KILLED, (n, first.stderr[-2000:])
        assert first.committed[-1][0] == n, (
            f"worker 1 died after seq {first.committed[-1][0]}, not {n}"
        )
        try:
            check(outcome, runs.reference)
        except AssertionError as exc:
            raise AssertionError(f"killed after seq {n}: {exc}") from exc
        unknown_at[n] = crashed_write_calls(outcome.events)
    # A kill right after the lone write's start (in the batch with the answer asking for it)
    # leaves it unknown, and it never ran.
    ref_events = runs.reference.events
    start = next(
        e.seq
        for e in ref_events
        if isinstance(p := e.payload, ToolStarted) and p.call_id == "call_2_0"
    )
    for n in (start - 1, start):
        assert unknown_at[n] == {"call_2_0"}, (n, unknown_at[n])
        outcome = runs.at_seq[n].result()
        assert "call_2_0" not in [line[0] for line in outcome.effects["write"]]
    # Everywhere else in the run, no write was in flight.
    finish = next(
        e.seq
        for e in ref_events
        if isinstance(p := e.payload, ToolFinished) and p.call_id == "call_2_0"
    )
    assert all(not unknown_at[n] for n in range(1, start - 1)), unknown_at
    assert all("call_2_0" not in unknown_at[n] for n in range(finish, len(ref_events) + 1))


@pytest.mark.parametrize("spec", IN_TOOL)
def test_a_kill_inside_a_tool_is_resumed_by_the_recovery_rules(runs: Runs, spec: str) -> None:
    outcome = runs.in_tool[spec].result()
    assert outcome.procs[0].returncode == KILLED
    check(outcome, runs.reference)
    call_id, when = spec.split(":")
    unknown = crashed_write_calls(outcome.events)
    runs_of = {
        kind: [line[0] for line in lines].count(call_id) for kind, lines in outcome.effects.items()
    }
    effect = next(p.effect for p in payloads(outcome.events, ToolStarted) if p.call_id == call_id)
    if effect == "write":
        # Never repeated: its effect happened once or never, as the kill fell.
        assert call_id in unknown
        assert runs_of["write"] == (1 if when == "after" else 0)
    else:
        # Run again by the resuming worker: read and idempotent calls are safe to repeat.
        assert call_id not in unknown
        assert runs_of[effect] == (2 if when == "after" else 1)
    starts = [p.call_id for p in payloads(outcome.events, ToolStarted)].count(call_id)
    assert starts == (1 if effect == "write" else 2)


def test_a_chain_of_workers_each_killed_at_its_second_commit_still_finishes_the_turn(
    runs: Runs,
) -> None:
    # Killed at the second commit, not the first: a worker killed at every first commit
    # would re-commit the start of a re-runnable call forever and never run it.
    outcome = runs.chain.result()
    check(outcome, runs.reference)
    killed = [p for p in outcome.procs if p.returncode == KILLED]
    assert len(killed) >= 8, [p.returncode for p in outcome.procs]
    assert all(p.returncode == 0 for p in outcome.procs if p not in killed)
