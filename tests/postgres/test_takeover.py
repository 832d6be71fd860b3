"""Takeover in parallel on PostgreSQL: a dead worker's sessions go to a busy worker, all in
one look (`tether_claim_runnable`), rather than one at a time to a worker that runs nothing."""

from __future__ import annotations

from takeover import dead_worker_sessions_resume_on_a_busy_worker, figures
from tether.store.postgres import PostgresStore


async def test_a_dead_workers_sessions_resume_on_a_busy_worker(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    latencies = await dead_worker_sessions_resume_on_a_busy_worker(store)
    print(f"postgresql: {figures(latencies)}")
    await store.close()
