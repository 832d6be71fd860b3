"""After compaction, a fresh process builds byte-identical requests from the log: the one a
crashed process was waiting on, and every request the session ever sent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from invariants import payloads
from tether.events import ContextCompacted, ModelRequested
from tether.store.sqlite import SQLiteStore

from .worker import CRASH_EXIT

TESTS = Path(__file__).resolve().parent.parent
CRASH_AT = 90


def _worker(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    return subprocess.run(
        [sys.executable, "-m", "context.worker", *args],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _bodies(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_a_fresh_process_resumes_a_compacted_session_with_byte_identical_requests(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "s.db")
    first, second, rebuilt = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "r.jsonl"

    crashed = _worker(db, str(first), "start", str(CRASH_AT))
    assert crashed.returncode == CRASH_EXIT, crashed.stderr
    session_id = first.with_suffix(".session").read_text()
    sent_before = _bodies(first)
    assert len(sent_before) == CRASH_AT

    store = SQLiteStore(db)
    events_at_crash = await store.read(session_id)
    await store.close()
    compactions = payloads(events_at_crash, ContextCompacted)
    assert any(c.summary for c in compactions) and any(c.cleared_call_ids for c in compactions)

    resumed = _worker(db, str(second), "resume", session_id)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"stop_reason": "end_turn", "output": "done"}
    sent_after = _bodies(second)
    # The request the crashed process was waiting on, asked again byte for byte.
    assert sent_after[0] == sent_before[-1]

    done = _worker(db, str(rebuilt), "rebuild", session_id)
    assert done.returncode == 0, done.stderr
    assert _bodies(rebuilt) == sent_before + sent_after

    store = SQLiteStore(db)
    events = await store.read(session_id)
    await store.close()
    assert len(payloads(events, ModelRequested)) == len(sent_before) + len(sent_after)
