"""Takeover in parallel on SQLite: a dead worker's sessions go to a busy worker, all in one
look, rather than one at a time to a worker that runs nothing (the PostgreSQL run of the
same scenario: tests/postgres/test_takeover.py)."""

from __future__ import annotations

from pathlib import Path

from takeover import dead_worker_sessions_resume_on_a_busy_worker, figures
from tether.store import SQLiteStore


async def test_a_dead_workers_sessions_resume_on_a_busy_worker(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "takeover.db"))
    latencies = await dead_worker_sessions_resume_on_a_busy_worker(store)
    print(f"sqlite: {figures(latencies)}")
    await store.close()
