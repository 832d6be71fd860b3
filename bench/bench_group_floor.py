"""CPU per model call with many agents at once on SQLite, beside SQLite's own group-commit
floor: N sessions (default 1,000) of 5 model calls each (4 tool steps and an answer), the
scripted model sleeping 20 ms per call so the sessions step together and their commits
share transactions (`store/group_commit.py`).

The floor is the same rows with no tether at all: for each step, every session's rows
(tether's own encoding, made beforehand and not timed) inserted with raw sqlite3 in the
commit pattern a tether step has (two commits per step: the answer with its calls'
starts, then the results with the next request), every session's batch of a commit in one
shared transaction, as group commit does at best. CPU is the process's (all threads), per
session-step. Each tether figure runs in a fresh subprocess. Never fails on time.

    .venv/bin/python bench/bench_group_floor.py [N]
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_durability import step_rows
from bench_sessions import DELAY, STEPS, run_scenario

CALLS = STEPS + 1  # model calls per session: the tool steps and the answer


def floor_cpu(sessions: int, rows: list[tuple[object, ...]]) -> float:
    """CPU seconds of the floor: CALLS steps of `sessions` sessions, two shared commits a
    step, each session's half of the step's rows in each."""
    path = Path(tempfile.mkdtemp()) / "floor.db"
    from tether.store.sqlite_format import SCHEMA as _SCHEMA

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.executescript(_SCHEMA)
    halves = [rows[: len(rows) // 2], rows[len(rows) // 2 :]]
    insert = (
        "INSERT INTO events (session_id, seq, id, time, thread, type, data) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
    seqs = [0] * sessions
    t0 = time.process_time()
    for _ in range(CALLS):
        for half in halves:
            conn.execute("BEGIN IMMEDIATE")
            for s in range(sessions):
                seq = seqs[s]
                conn.executemany(
                    insert, [(f"s{s}", seq + i, *row[2:]) for i, row in enumerate(half, 1)]
                )
                seqs[s] = seq + len(half)
            conn.execute("COMMIT")
    cpu = time.process_time() - t0
    conn.close()
    return cpu


def main(sessions: int) -> None:
    rows = asyncio.run(step_rows())
    per_call = sessions * CALLS
    print(
        f"{sessions} sessions at once, {CALLS} model calls each ({DELAY * 1000:.0f} ms per call); "
        f"µs of CPU per model call (a session-step of {len(rows)} events)"
    )
    floor = floor_cpu(sessions, rows) / per_call * 1e6
    figures = {}
    for kind in ("bare", "memory", "sqlite"):
        out = subprocess.run(
            [sys.executable, __file__, "--child", kind, str(sessions)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        figures[kind] = json.loads(out.strip().splitlines()[-1])["cpu_s"] / per_call * 1e6
    print(f"  {'bare asyncio loop':<34} {figures['bare']:8.1f} µs")
    print(f"  {'SQLite group-commit floor':<34} {floor:8.1f} µs")
    print(f"  {'tether, memory store':<34} {figures['memory']:8.1f} µs")
    print(
        f"  {'tether, SQLite store':<34} {figures['sqlite']:8.1f} µs   "
        f"{figures['sqlite'] / floor:5.1f} × the floor (target ≤ 3×); "
        f"less the memory store's: {(figures['sqlite'] - figures['memory']) / floor:4.1f} ×"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(asyncio.run(run_scenario(sys.argv[2], int(sys.argv[3])))))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
