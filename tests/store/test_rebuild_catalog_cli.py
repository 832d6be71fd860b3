"""`tether db rebuild-catalog`, run for real: rows that went wrong are written again from the
logs, progress is printed on stderr, the report on stdout; a store that is not there is a
one-line error and nothing is made."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from catalog_files import check_file, format_4_file
from tether.store import SQLiteStore

SESSIONS = 1_200  # two pages of the rebuild's 1,000


def _tether(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return subprocess.run(
        [sys.executable, "-m", "tether", *args], env=env, capture_output=True, text=True
    )


def test_rebuild_catalog_writes_every_row_from_its_log_and_prints_progress(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    format_4_file(db, SESSIONS)
    asyncio.run(SQLiteStore(str(db)).close())  # opened: backfilled
    conn = sqlite3.connect(db)
    conn.execute("UPDATE catalog SET state = 'running', task = 'wrong', steps = steps + 1")
    conn.commit()
    conn.close()

    done = _tether("db", "rebuild-catalog", "--store", f"sqlite:///{db}")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"rebuilt {n} of {SESSIONS} sessions" for n in (1000, SESSIONS)
    ]
    assert done.stdout.startswith(f"sqlite:///{db}: catalog rebuilt from the logs of {SESSIONS} ")
    assert check_file(db) == SESSIONS

    as_json = _tether("db", "rebuild-catalog", "--store", f"sqlite:///{db}", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["sessions"] == SESSIONS


def test_rebuild_catalog_of_a_missing_store_is_one_line_and_makes_nothing(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nope.db"
    refused = _tether("db", "rebuild-catalog", "--store", f"sqlite:///{missing}")
    assert refused.returncode != 0
    assert refused.stderr.startswith("tether: error: no store at ")
    assert len(refused.stderr.splitlines()) == 1
    assert not missing.exists()
