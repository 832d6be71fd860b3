"""The catalog's readers on PostgreSQL: an experiment's runs found whole by their tag among
thousands of newer sessions, and `/metrics` counting the sessions a separate worker process
runs (the checks are in `tests/experiment/test_found_by_tag.py` and
`tests/server/test_state_gauges.py`)."""

from __future__ import annotations

from pathlib import Path

from experiment.test_found_by_tag import check_found_whole_by_tag
from server.test_state_gauges import check_sessions_another_process_runs_are_counted
from tether.store import open_store


async def test_an_experiment_is_found_whole_by_its_tag_on_postgres(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        await check_found_whole_by_tag(store)
    finally:
        await store.close()


async def test_the_state_gauges_count_another_processs_sessions_on_postgres(
    tmp_path: Path, pg_url: str
) -> None:
    await check_sessions_another_process_runs_are_counted(tmp_path, pg_url)
