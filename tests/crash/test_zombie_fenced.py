"""A zombie whose tool asks before its effect: paused (SIGSTOP) while its tool waits, until
its lease has run out and another worker has taken the session over. Woken (SIGCONT), its
tool's `ctx.ensure_held()` (or, on a thread, `ensure_held_sync()` / `lease_lost`) refuses
before the external write, so the write the log calls `unknown_effect` never happens."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from invariants import assert_log_invariants, payloads
from tether.events import ToolFinished

from .support import WORKER, env_for, read_session, run_worker
from .test_zombie import wait_for


@pytest.mark.parametrize("script", ["zombie_fenced", "zombie_fenced_thread"])
def test_a_woken_zombies_tool_is_refused_before_its_external_write(
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
        taker = run_worker(db, script, "resume", session_id)
        assert taker.returncode == 0, taker.stderr
        assert taker.last("result")["result"]["stop_reason"] == "end_turn"
        _, taken_over = read_session(db, session_id)

        (tmp_path / "go").touch()
        os.kill(zombie.pid, signal.SIGCONT)
        _, err = zombie.communicate(timeout=30)
    finally:
        if zombie.poll() is None:
            os.kill(zombie.pid, signal.SIGCONT)
            zombie.kill()
            zombie.wait()

    assert zombie.returncode == 3, err  # it stopped on its lost lease
    assert not (tmp_path / "write.log").exists(), "the zombie's write happened"
    refused = (tmp_path / "refused.log").read_text().split()
    fence = (tmp_path / "running").read_text().split()[2]
    assert refused[:2] == ["call_0_0", fence]
    _, events = read_session(db, session_id)
    assert events == taken_over, "the log changed after the zombie woke"
    assert_log_invariants(events)
    assert [(f.call_id, f.outcome) for f in payloads(events, ToolFinished)] == [
        ("call_0_0", "unknown_effect")
    ]
