"""PostgreSQL stopped for 10 s in the middle of a run, as issue 20 asks: two `tether worker`
processes run sessions of `write` calls on a server of the test's own (started, stopped and
started again by `.ci/postgres.sh`, so the shared server of the other tests is untouched).

What must hold once the server is back: every session completes; no `write` effect happens
twice; a call whose effect happened before the stop is answered with its result, never
`unknown_effect` (its commit was retried until the database came back, within its lease);
and no worker reports a task exception that nobody retrieved.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from invariants import assert_log_invariants
from postgres.chaos_fixtures import EFFECTS, MODEL, TOOLS
from postgres.conftest import BASE_URL, HOW
from postgres.fleet_queries import ended
from tether.events import ToolFinished
from tether.fold import Folder
from tether.runtime import LocalRuntime
from tether.runtime.base import SessionSpec
from tether.store.postgres import PostgresStore

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SESSIONS = 120
WORKERS = 2
OUTAGE = 10.0  # seconds the server stays down
TTL = 30.0  # a lease outlives the outage: commits are retried, not given up
STOP_AFTER = 20  # effects seen before the server is stopped: the run is under way
DEADLINE = 120.0


def _server(mode: str, folder: str, port: int) -> str:
    """Run `.ci/postgres.sh MODE` for the test's own server; what it printed."""
    env = {**os.environ, "TETHER_PG_DIR": folder, "TETHER_PG_PORT": str(port)}
    done = subprocess.run(
        ["bash", str(ROOT / ".ci" / "postgres.sh"), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, f"postgres.sh {mode}: {done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture
async def own_server() -> AsyncIterator[tuple[str, str, int]]:
    """A PostgreSQL server for this test alone: (its URL, its data folder, its port)."""
    if not BASE_URL:
        if os.environ.get("CI"):
            pytest.fail(f"TETHER_TEST_POSTGRES_URL is not set in CI: {HOW}")
        pytest.skip(f"TETHER_TEST_POSTGRES_URL is not set: {HOW}")
    # Not under the test's tmp_path: the server runs as `postgres` when the tests run as
    # root, and must be able to enter every folder above its data.
    folder = f"/tmp/tether-pg-outage-{secrets.token_hex(4)}"
    port = 56000 + secrets.randbelow(2000)
    printed = await asyncio.to_thread(_server, "start", folder, port)
    url = printed.strip().rsplit("=", 1)[1]
    try:
        yield url, folder, port
    finally:
        await asyncio.to_thread(_server, "destroy", folder, port)


async def _start_workers(url: str, tmp: Path) -> list[tuple[asyncio.subprocess.Process, Path]]:
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, EFFECTS: str(tmp / "effects.txt")}
    workers = []
    for n in range(WORKERS):
        log_path = tmp / f"worker-{n}.log"
        with open(log_path, "wb") as log:  # noqa: ASYNC230  (a local file, opened once)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tether", "worker", "--store", url,
                "--concurrency", "8", "--lease-ttl", str(TTL), "--poll-interval", "0.1",
                "--drain", "0", "--allow-code", "postgres.chaos_fixtures:*", "--log-level", "warning",
                env=env, stdout=log, stderr=log,
            )  # fmt: skip
        workers.append((proc, log_path))
    return workers


def _effects(tmp: Path) -> list[tuple[str, str]]:
    path = tmp / "effects.txt"
    if not path.exists():
        return []
    return [tuple(line.split()[:2]) for line in path.read_text().splitlines() if line]  # type: ignore[misc]


async def test_a_database_stopped_for_ten_seconds_loses_no_finished_result(
    own_server: tuple[str, str, int], tmp_path: Path
) -> None:
    url, folder, port = own_server
    store = PostgresStore(url)
    async with LocalRuntime(store, workers=0) as runtime:  # starts them as `tether serve` would
        refs = [
            await runtime.start(SessionSpec(MODEL, "write twice", TOOLS, end_after_turn=True))
            for _ in range(SESSIONS)
        ]
    ids = [ref.session_id for ref in refs]
    await store.close()

    workers = await _start_workers(url, tmp_path)
    try:
        started = time.monotonic()
        while len(_effects(tmp_path)) < STOP_AFTER:
            assert time.monotonic() - started < DEADLINE, "the workers never got going"
            await asyncio.sleep(0.02)
        before_stop = set(_effects(tmp_path))
        await asyncio.to_thread(_server, "stop", folder, port)
        stopped_at = time.monotonic()
        await asyncio.sleep(OUTAGE)
        await asyncio.to_thread(_server, "start", folder, port)
        down_for = time.monotonic() - stopped_at
        store = PostgresStore(url)
        while await ended(store, ids) < len(ids):
            assert time.monotonic() - started < DEADLINE, "sessions did not end in time"
            await asyncio.sleep(0.2)
    finally:
        for proc, _ in workers:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
    assert all(proc.returncode == -9 for proc, _ in workers), "a worker died during the outage"
    assert down_for >= OUTAGE

    # Every session completed, and its log keeps every invariant.
    outcomes: dict[tuple[str, str], str] = {}
    for sid in ids:
        events = await store.read(sid)
        assert_log_invariants(events)
        view = Folder().apply_all(events).view()
        assert (view.state, view.stop_reason, view.last_output) == (
            "completed",
            "end_turn",
            "done",
        ), (sid, view)
        for e in events:
            if isinstance(e.payload, ToolFinished):
                outcomes[(sid, e.payload.call_id)] = e.payload.outcome
    await store.close()

    # No effect twice; every effect from before the stop was answered with its result.
    effects = Counter(_effects(tmp_path))
    assert max(effects.values()) == 1, [k for k, n in effects.items() if n > 1]
    assert len(before_stop) >= STOP_AFTER
    lost = {key: outcomes.get(key) for key in before_stop if outcomes.get(key) != "ok"}
    assert not lost, f"finished before the stop, yet answered: {lost}"
    assert all(outcome == "ok" for outcome in outcomes.values()), Counter(outcomes.values())

    # The outage was noticed and ridden out, and nothing was left unretrieved.
    logs = "".join(path.read_text(errors="replace") for _, path in workers)
    assert "never retrieved" not in logs, logs[-3000:]
    assert "Traceback" not in logs, logs[-3000:]
    print(
        f"\noutage: server down {down_for:.1f} s, {len(before_stop)} effects before the stop, "
        f"{sum(effects.values())} in all, {len(ids)} sessions completed"
    )
