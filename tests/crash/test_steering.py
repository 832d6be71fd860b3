"""Approvals, cancels and interrupts across processes: one process runs the session (or
paused it and exited), others steer it with `tether sessions approve|deny|cancel|interrupt`
and continue it with `tether sessions resume`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from invariants import assert_log_invariants, kinds, payloads
from tether.cli.common import exit_code
from tether.events import (
    ApprovalDecided,
    CancelRequested,
    Event,
    SessionCreated,
    SessionEnded,
    ToolFinished,
    TurnEnded,
)
from tether.fold import fold
from tether.session.control import send_message
from tether.store import SQLiteStore

from . import kit
from .support import env_for, read_session, run_worker, session_ids, tether

APPROVAL = ("--model", "python:crash.kit:approval_model", "--tools", "crash.kit:APPROVAL_TOOLS")
LONG = ("--model", "python:crash.kit:long_model", "--tools", "crash.kit:LONG_TOOLS")
QUICK = ("--model", "python:crash.kit:quick_model", "--tools", "crash.kit:LONG_TOOLS")


def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tether.db'}"


def run_json(*args: str, cwd: Path) -> dict[str, object]:
    out = tether(*args, "--json", cwd=cwd)
    result: dict[str, object] = json.loads(out.stdout.splitlines()[-1])
    assert out.returncode == exit_code(str(result["stop_reason"])), out.stderr
    return result


def epoch(event: Event) -> float:
    return datetime.fromisoformat(event.time.replace("Z", "+00:00")).timestamp()


def long_records(tmp_path: Path) -> dict[str, float]:
    """What the long tool noted: 'started', 'cancelled' or 'finished', with when."""
    return {parts[1]: float(parts[2]) for parts in kit.read_records(tmp_path, "long")}


def start_worker(
    tmp_path: Path, *model: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tether",
            "run",
            "write slowly",
            *model,
            "--store",
            url(tmp_path),
            "--json",
        ],
        cwd=tmp_path,
        env=env_for(tmp_path, env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def finish(worker: subprocess.Popen[str]) -> dict[str, object]:
    out, err = worker.communicate(timeout=60)
    result: dict[str, object] = json.loads(out.splitlines()[-1])
    assert worker.returncode == exit_code(str(result["stop_reason"])), err
    return result


def the_session(tmp_path: Path) -> str:
    db = tmp_path / "tether.db"
    wait_for(lambda: session_ids(db), "the session to be created")
    (sid,) = session_ids(db)
    return sid


# -- approvals -----------------------------------------------------------------------------


def test_an_approval_given_from_another_process_runs_the_call_once_on_resume(
    tmp_path: Path,
) -> None:
    paused = run_json("run", "Pay 30", *APPROVAL, "--store", url(tmp_path), cwd=tmp_path)
    sid = str(paused["session_id"])
    assert (paused["stop_reason"], paused["state"]) == ("awaiting_approval", "waiting_approval")
    assert not (tmp_path / "write.log").exists()  # the process exited; nothing ran

    approve = tether("sessions", "approve", sid, "call_0_0", "--store", url(tmp_path), cwd=tmp_path)
    assert approve.returncode == 0, approve.stderr
    # No --model or --tools: resume rebuilds the agent from what `run` recorded.
    resumed = run_json("sessions", "resume", sid, "--store", url(tmp_path), cwd=tmp_path)
    assert (resumed["stop_reason"], resumed["state"], resumed["output"]) == (
        "end_turn",
        "idle",
        "transfer handled",
    )
    again = run_json("sessions", "resume", sid, "--store", url(tmp_path), cwd=tmp_path)
    assert again["stop_reason"] == "end_turn"

    assert kit.read_records(tmp_path, "write") == [["call_0_0", "transfer=30"]]
    _, events = read_session(tmp_path / "tether.db", sid)
    assert_log_invariants(events)
    created = events[0].payload
    assert isinstance(created, SessionCreated)
    assert created.metadata["cli"] == {
        "model": "python:crash.kit:approval_model",
        "tools": ["crash.kit:APPROVAL_TOOLS"],
        "mcp": None,
    }
    assert payloads(events, ApprovalDecided) == [ApprovalDecided("call_0_0", True, None)]
    assert [(f.call_id, f.outcome) for f in payloads(events, ToolFinished)] == [("call_0_0", "ok")]


def test_a_denial_with_a_reason_is_the_calls_answer_and_the_call_never_runs(
    tmp_path: Path,
) -> None:
    paused = run_json("run", "Pay 30", *APPROVAL, "--store", url(tmp_path), cwd=tmp_path)
    sid = str(paused["session_id"])
    deny = tether(
        "sessions",
        "deny",
        sid,
        "call_0_0",
        "--reason",
        "over the daily limit",
        "--store",
        url(tmp_path),
        cwd=tmp_path,
    )
    assert deny.returncode == 0, deny.stderr
    late = tether("sessions", "approve", sid, "call_0_0", "--store", url(tmp_path), cwd=tmp_path)
    assert late.returncode == 2 and "not waiting for a decision" in late.stderr

    # With --model and --tools given again, they are used as given.
    resumed = run_json("sessions", "resume", sid, *APPROVAL, "--store", url(tmp_path), cwd=tmp_path)
    assert (resumed["stop_reason"], resumed["state"]) == ("end_turn", "idle")

    assert kit.read_records(tmp_path, "write") == []
    _, events = read_session(tmp_path / "tether.db", sid)
    assert_log_invariants(events)
    (answer,) = payloads(events, ToolFinished)
    assert (answer.call_id, answer.outcome) == ("call_0_0", "denied")
    assert "over the daily limit" in answer.content


# -- cancel and interrupt ------------------------------------------------------------------


def steer_a_long_tool(
    tmp_path: Path, command: str
) -> tuple[str, subprocess.CompletedProcess[str], dict[str, object]]:
    """Start a worker on the long tool, send `tether sessions COMMAND` from another process
    once the tool runs, and wait for the worker: the session id, the command, the result."""
    worker = start_worker(tmp_path, *LONG)
    try:
        wait_for(lambda: "started" in long_records(tmp_path), "the long tool to start")
        sid = the_session(tmp_path)
        steered = tether("sessions", command, sid, "--store", url(tmp_path), cwd=tmp_path)
        result = finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
    return sid, steered, result


def test_a_cancel_from_another_process_stops_a_running_tool_within_a_second_or_so(
    tmp_path: Path,
) -> None:
    sid, cancel, result = steer_a_long_tool(tmp_path, "cancel")
    assert cancel.returncode == 0, cancel.stderr
    assert "asked the running worker to stop" in cancel.stdout
    assert (result["state"], result["stop_reason"]) == ("canceled", "interrupted")

    _, events = read_session(tmp_path / "tether.db", sid)
    assert_log_invariants(events)
    (asked,) = [e for e in events if isinstance(e.payload, CancelRequested)]
    noticed = long_records(tmp_path)["cancelled"] - epoch(asked)
    assert 0 <= noticed < 3.0, f"the worker took {noticed:.2f} s to cancel the tool"
    assert "finished" not in long_records(tmp_path)
    assert [(f.call_id, f.outcome) for f in payloads(events, ToolFinished)] == [
        ("call_0_0", "canceled")
    ]
    assert [t.stop_reason for t in payloads(events, TurnEnded)] == ["interrupted"]
    assert [s.outcome for s in payloads(events, SessionEnded)] == ["canceled"]


def test_an_interrupt_from_another_process_ends_the_turn_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    sid, interrupt, result = steer_a_long_tool(tmp_path, "interrupt")
    assert interrupt.returncode == 0, interrupt.stderr
    assert (result["state"], result["stop_reason"]) == ("idle", "interrupted")
    assert "cancelled" in long_records(tmp_path)

    async def send() -> None:
        store = SQLiteStore(str(tmp_path / "tether.db"))
        try:
            await send_message(store, sid, "never mind, just say so")
        finally:
            await store.close()

    asyncio.run(send())
    resumed = run_json("sessions", "resume", sid, "--store", url(tmp_path), cwd=tmp_path)
    assert (resumed["state"], resumed["stop_reason"], resumed["output"]) == (
        "idle",
        "end_turn",
        "stopped as asked",
    )
    _, events = read_session(tmp_path / "tether.db", sid)
    assert_log_invariants(events)
    assert [t.stop_reason for t in payloads(events, TurnEnded)] == ["interrupted", "end_turn"]
    assert not payloads(events, SessionEnded)


def test_two_cancels_at_once_leave_one_request_and_one_end(tmp_path: Path) -> None:
    worker = start_worker(tmp_path, *LONG)
    try:
        wait_for(lambda: "started" in long_records(tmp_path), "the long tool to start")
        sid = the_session(tmp_path)
        cancels = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tether",
                    "sessions",
                    "cancel",
                    sid,
                    "--store",
                    url(tmp_path),
                ],
                cwd=tmp_path,
                env=env_for(tmp_path),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outs = [c.communicate(timeout=60) for c in cancels]
        result = finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert all(c.returncode == 0 for c in cancels), outs
    assert result["state"] == "canceled"
    late = tether("sessions", "cancel", sid, "--store", url(tmp_path), cwd=tmp_path)
    assert late.returncode == 0 and "nothing to do" in late.stdout

    _, events = read_session(tmp_path / "tether.db", sid)
    assert_log_invariants(events)
    assert kinds(events).count("cancel.requested") == 1
    assert kinds(events).count("session.ended") == 1
    assert kinds(events).count("turn.ended") == 1


@pytest.mark.parametrize("delay", [0.0, 0.1, 0.2, 0.4])
def test_a_cancel_racing_the_end_of_the_turn_leaves_exactly_one_end(
    tmp_path: Path, delay: float
) -> None:
    # The read takes 0.3 s and a cancel process about as long to start: depending on the
    # delay, the cancel reaches the worker mid-turn, as it finishes, or after it left.
    worker = start_worker(tmp_path, *QUICK, env={"QUICK_READ_SECONDS": "0.3"})
    try:
        sid = the_session(tmp_path)
        time.sleep(delay)
        cancel = tether("sessions", "cancel", sid, "--store", url(tmp_path), cwd=tmp_path)
        finish(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert cancel.returncode == 0, cancel.stderr

    _, events = read_session(tmp_path / "tether.db", sid)
    assert_log_invariants(events)
    _, view = fold(events)
    assert view.state == "canceled", (cancel.stdout, kinds(events))
    assert kinds(events).count("session.ended") == 1
    assert kinds(events).count("turn.ended") == 1
    assert kinds(events).count("cancel.requested") <= 1


def test_a_cancel_while_a_dead_worker_holds_the_lease_is_honoured_by_whoever_resumes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "tether.db"
    # A lease long enough that the cancel below, a fresh process on a loaded machine, still
    # finds it held (with the default 1 s it could expire first: then nobody runs it).
    dead = run_worker(
        db, "crash", "start", env={kit.CRASH_CALL_ENV: "call_2_0:after", "WORKER_TTL": "8"}
    )
    assert dead.returncode < 0
    sid, _ = read_session(db)
    cancel = tether("sessions", "cancel", sid, "--store", url(tmp_path), cwd=tmp_path)
    assert cancel.returncode == 0 and "asked the running worker" in cancel.stdout

    resumed = run_json(
        "sessions",
        "resume",
        sid,
        "--model",
        "python:crash.kit:crash_model",
        "--tools",
        "crash.kit:CRASH_TOOLS",
        "--lease-wait",
        "30",
        "--store",
        url(tmp_path),
        cwd=tmp_path,
    )
    assert (resumed["state"], resumed["stop_reason"]) == ("canceled", "interrupted")
    _, events = read_session(db, sid)
    assert_log_invariants(events)
    # The write the dead worker was running is answered once and never repeated.
    assert [line[0] for line in kit.read_records(tmp_path, "write")] == ["call_2_0"]
    closing = [
        (f.call_id, f.outcome) for f in payloads(events, ToolFinished) if f.call_id == "call_2_0"
    ]
    assert len(closing) == 1 and closing[0][1] in ("canceled", "unknown_effect")
    assert kinds(events).count("session.ended") == 1
