"""A zombie worker: paused (SIGSTOP) while its tool runs, until its lease has run out and
another worker has taken the session over and finished it. Woken (SIGCONT), every append
it tries is refused and it stops without writing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from invariants import assert_log_invariants, payloads
from tether.events import ToolFinished
from tether.fold import fold

from .support import WORKER, by_prefix, env_for, parse_facts, read_session, run_worker

# The zombie's own appends before it was paused: the session with its task, the model
# request, and the answer with the start of its call.
COMMITS_BEFORE_PAUSE = 3


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.parametrize(
    "script",
    [
        # The tool blocks the event loop, so the first thing the woken worker does is append
        # its result: the store refuses it.
        "zombie_blocking",
        # The tool runs in a thread: the woken worker's watcher may notice the lost lease
        # first and stop the turn before any append is tried. Either way nothing lands.
        "zombie_thread",
    ],
)
def test_a_paused_worker_cannot_write_after_another_took_the_session_over(
    tmp_path: Path, script: str
) -> None:
    db = tmp_path / "tether.db"
    zombie = subprocess.Popen(
        [sys.executable, str(WORKER), str(db), script, "start"],
        env=env_for(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for((tmp_path / "running").exists, "the zombie's tool to start")
        os.kill(zombie.pid, signal.SIGSTOP)
        session_id, _ = read_session(db)

        # The paused worker renews nothing: the new worker waits its lease out and takes over.
        taker = run_worker(db, script, "resume", session_id)
        assert taker.returncode == 0, taker.stderr
        assert taker.last("result")["result"]["stop_reason"] == "end_turn"
        _, taken_over = read_session(db, session_id)

        (tmp_path / "go").touch()  # the held tool may finish now
        os.kill(zombie.pid, signal.SIGCONT)
        out, err = zombie.communicate(timeout=30)
    finally:
        if zombie.poll() is None:
            os.kill(zombie.pid, signal.SIGCONT)
            zombie.kill()
            zombie.wait()

    facts = parse_facts(out)
    zombie_prefix = facts[0]["prefix"]
    assert zombie.returncode == 3, err
    lost = facts[-1]
    assert "lease_lost" in lost, facts
    assert lost["tried"] - lost["refused"] == COMMITS_BEFORE_PAUSE, lost
    if script == "zombie_blocking":
        assert lost["refused"] == 1, lost  # its tool's result, refused by the store

    _, events = read_session(db, session_id)
    assert events == taken_over, "the log changed after the zombie woke"
    assert_log_invariants(events)
    first_of_taker = min(e.seq for e in events if by_prefix(e) == taker.prefix)
    from_zombie = [e.seq for e in events if by_prefix(e) == zombie_prefix]
    assert len(from_zombie) >= COMMITS_BEFORE_PAUSE
    assert max(from_zombie) < first_of_taker, "a zombie event landed after the takeover"
    # The new worker did not repeat the write: its effect is unknown to the log. The zombie's
    # effect did happen once, after the takeover: exactly why the model is told to inspect.
    assert [(f.call_id, f.outcome) for f in payloads(events, ToolFinished)] == [
        ("call_0_0", "unknown_effect")
    ]
    assert (tmp_path / "write.log").read_text().count("call_0_0") == 1
    _, view = fold(events)
    assert (view.state, view.stop_reason) == ("idle", "end_turn")
