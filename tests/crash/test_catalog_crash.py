"""The catalog survives SIGKILL: a worker killed between its appends leaves every row equal
to the fold of its log (rows are written in the append's transaction), and a process killed
during the backfill of a format-4 file, inside a chunk or between two, leaves a file the
next open finishes, its catalog then equal to a rebuild from the logs, row for row."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from catalog_files import catalog_size, check_file, format_4_file, meta
from tether.fold import Folder
from tether.store import sqlite_backfill

from .backfill_worker import CHUNK
from .support import HERE, TIMEOUT, env_for, read_session, run_worker

KILLED = -signal.SIGKILL
SESSIONS = 200


def _backfill_killed(db: Path, mode: str, at: int) -> None:
    out = subprocess.run(
        [sys.executable, str(HERE / "backfill_worker.py"), str(db), mode, str(at)],
        env=env_for(db.parent),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert out.returncode == KILLED, (out.returncode, out.stdout, out.stderr)


def test_a_backfill_killed_inside_and_between_chunks_is_finished_by_the_next_open(
    tmp_path: Path,
) -> None:
    db = tmp_path / "v4.db"
    ids = format_4_file(db, SESSIONS)
    # Killed writing the 35th row: the first three chunks stand, the fourth left no trace.
    _backfill_killed(db, "row", 35)
    assert meta(db, "format") == "6"
    assert meta(db, sqlite_backfill.BACKFILL_KEY) == ids[3 * CHUNK - 1]
    assert catalog_size(db) == 3 * CHUNK
    # The next process goes on from there, and is killed after two chunks of its own.
    _backfill_killed(db, "chunk", 2)
    assert meta(db, sqlite_backfill.BACKFILL_KEY) == ids[5 * CHUNK - 1]
    assert catalog_size(db) == 5 * CHUNK
    # Then an open that is not killed finishes it.
    assert check_file(db) == SESSIONS
    assert meta(db, sqlite_backfill.BACKFILL_KEY) is None
    assert catalog_size(db) == SESSIONS


@pytest.mark.parametrize(
    ("env", "kills"),
    [
        ({"CRASH_AFTER_APPENDS": "2"}, 2),  # every process dies after its second append
        ({"CRASH_AT_SEQ": "5"}, 1),  # the one that commits seq 5 dies
    ],
)
def test_a_worker_killed_between_appends_leaves_the_catalog_equal_to_its_log(
    tmp_path: Path, env: dict[str, str], kills: int
) -> None:
    db = tmp_path / "tether.db"
    procs = [run_worker(db, "crash", "start", env=env)]
    assert procs[0].returncode == KILLED, procs[0].stderr
    assert check_file(db) == 1
    session_id, events = read_session(db)
    while Folder().apply_all(events).turn_open:
        assert len(procs) < 40, "the turn is still open after 40 processes"
        procs.append(run_worker(db, "crash", "resume", session_id, env=env))
        assert procs[-1].returncode in (0, KILLED), procs[-1].stderr
        assert check_file(db) == 1  # after each process, killed or not
        _, events = read_session(db, session_id)
    assert sum(p.returncode == KILLED for p in procs) >= kills
