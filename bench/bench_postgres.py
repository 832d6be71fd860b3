"""Throughput of real `tether worker` processes: sessions completed and events appended per
second with 1, 2, 4 and 8 workers on PostgreSQL, beside one worker on the embedded SQLite
store doing the same sessions, and what each session cost in CPU: the workers' (all their
processes), the database server's, and its commits. The wall clock depends on what else the
machine runs; the CPU per session much less, which is what tells a cost of ours (more
commits or more work per session as workers are added) from a machine with too few cores.

Each session is the runtime fixtures' `note 2` turn (two tool steps, then an answer: 11
events after its two creation events), started as `LocalRuntime.start` would start it. The
sessions are created first and unmarked; the clock runs from the moment they are all marked
runnable (the workers already running) until every turn has ended. Needs
TETHER_TEST_POSTGRES_URL (`eval "$(bash .ci/postgres.sh)"`) for the PostgreSQL rows; prints
and never fails on time. The bare loop (no store, no runtime) doing the same turns is
printed beside.

    .venv/bin/python bench/bench_postgres.py        (BENCH_SESSIONS=400 by default)
    BENCH_WORKERS=1,2 BENCH_CONCURRENCY=8 BENCH_POLL=0.5 .venv/bin/python bench/bench_postgres.py
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import bare_loop
from tether.runtime.base import SessionSpec
from tether.runtime.sessions import build_runner, create_session, created_event
from tether.store.base import Store
from tether.store.sqlite import SQLiteStore
from tether.testing.runtime_fixtures import MODEL, TOOLS

SESSIONS = int(os.environ.get("BENCH_SESSIONS", "400"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "16"))  # sessions each worker runs at once
WORKERS = tuple(int(n) for n in os.environ.get("BENCH_WORKERS", "1,2,4,8").split(","))
SPEC = SessionSpec(MODEL, "note 2", tools=TOOLS)
LAST_SEQ = 13  # session.created, the task, 3 model calls (2 with a tool step), turn.ended


async def create_sessions(store: Store, count: int) -> list[str]:
    model, tools = build_runner(SPEC.model, SPEC.tools)
    created = created_event(SPEC, model, tools, None, None)
    return [
        await create_session(store, SPEC, created, None, None, time.time()) for _ in range(count)
    ]


async def start_workers(url: str, count: int) -> list[asyncio.subprocess.Process]:
    """`tether worker` processes, each returned once it says it is running sessions."""
    procs = []
    for _ in range(count):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tether", "worker", "--store", url,
            "--concurrency", str(CONCURRENCY), "--lease-ttl", "30", "--poll-interval", os.environ.get("BENCH_POLL", "0.05"),
            "--drain", "0", "--log-level", "error",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        assert proc.stdout is not None
        line = (await proc.stdout.readline()).decode()
        assert "running sessions" in line, line
        procs.append(proc)
    await asyncio.sleep(0.3)  # LISTEN and the first polls under way
    return procs


def cpu_seconds(pids: Sequence[int]) -> float:
    """User and system CPU the processes have used, from /proc (0 for one that is gone)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / os.sysconf("SC_CLK_TCK")


def postgres_pids() -> list[int]:
    """Every PostgreSQL server process on this machine (the server and its backends)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@dataclass
class Run:
    took: float
    events: int
    worker_cpu: float  # seconds, all worker processes
    server_cpu: float | None  # seconds, the PostgreSQL server's processes (None: SQLite)
    commits: int | None  # transactions the database committed meanwhile (PostgreSQL)


async def timed_run(
    store: Store,
    url: str,
    workers: int,
    unmark: Callable[[], Awaitable[None]],
    mark_all: Callable[[Sequence[str]], Awaitable[None]],
    commits: Callable[[], Awaitable[int]] | None = None,
) -> Run:
    ids = await create_sessions(store, SESSIONS)
    await unmark()  # marked again below, timed
    procs = await start_workers(url, workers)
    pids = [p.pid for p in procs]
    try:
        servers = postgres_pids() if commits is not None else []
        cpu_before = cpu_seconds(pids), cpu_seconds(servers)
        commits_before = await commits() if commits is not None else 0
        started = time.perf_counter()
        await mark_all(ids)
        while True:
            seqs = await store.last_seqs(ids)
            if all(seqs.get(sid) == LAST_SEQ for sid in ids):
                break
            await asyncio.sleep(0.01)
        took = time.perf_counter() - started
        worker_cpu = cpu_seconds(pids) - cpu_before[0]
        # Backends that started meanwhile are counted from zero.
        server_cpu = cpu_seconds(postgres_pids()) - cpu_before[1] if commits else None
        committed = await commits() - commits_before if commits is not None else None
    finally:
        for proc in procs:
            proc.terminate()
            await proc.wait()
    return Run(took, sum(seqs.values()) - 2 * len(ids), worker_cpu, server_cpu, committed)


async def run_sqlite(path: str) -> Run:
    store = SQLiteStore(path)

    async def unmark() -> None:
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM wakeups")

    async def mark_all(ids: Sequence[str]) -> None:
        with sqlite3.connect(path, timeout=10) as conn:  # one transaction for all
            now = time.time()
            conn.executemany(
                "INSERT INTO wakeups (session_id, token, marked) VALUES (?, 1, ?)",
                [(s, now) for s in ids],
            )

    try:
        return await timed_run(store, f"sqlite:///{path}", 1, unmark, mark_all)
    finally:
        await store.close()


async def run_postgres(base: str, workers: int) -> Run:
    from psycopg import AsyncConnection

    from tether.store.postgres import PostgresStore

    schema = f"bench_{secrets.token_hex(4)}"
    async with await AsyncConnection.connect(base, autocommit=True) as conn:
        await conn.execute(f"CREATE SCHEMA {schema}")
    url = f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"
    store = PostgresStore(url)

    async def unmark() -> None:
        await store.execute("DELETE FROM tether_wakeups", ())

    async def mark_all(ids: Sequence[str]) -> None:
        await store.execute(
            "SELECT tether_mark(session_id) FROM tether_sessions ORDER BY created", ()
        )

    async def commits() -> int:
        rows = await store.fetch_all(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()", ()
        )
        return int(rows[0][0])

    try:
        return await timed_run(store, url, workers, unmark, mark_all, commits)
    finally:
        await store.close()
        async with await AsyncConnection.connect(base, autocommit=True) as conn:
            await conn.execute(f"DROP SCHEMA {schema} CASCADE")


def row(label: str, run: Run | float) -> None:
    if isinstance(run, float):  # the bare loop: no events, no processes
        print(f"{label:<24}{run:>9.2f}{'':>11}{SESSIONS / run:>12.1f}")
        return
    server = "" if run.server_cpu is None else f"{run.server_cpu / SESSIONS * 1000:.2f}"
    commits = "" if run.commits is None else f"{run.commits / SESSIONS:.1f}"
    print(
        f"{label:<24}{run.took:>9.2f}{run.events / run.took:>11.0f}{SESSIONS / run.took:>12.1f}"
        f"{run.worker_cpu / SESSIONS * 1000:>14.2f}{server:>14}{commits:>13}"
    )


async def main() -> None:
    print(
        f"{SESSIONS} sessions of one turn (2 tool steps, 11 events each); "
        f"real `tether worker` processes, {CONCURRENCY} sessions at once each"
    )
    print(
        "CPU per session is load-independent where the wall clock is not: workers' CPU (all\n"
        "processes), the database server's CPU and its commits per session (PostgreSQL only)."
    )
    print(
        f"{'backend':<24}{'seconds':>9}{'events/s':>11}{'sessions/s':>12}"
        f"{'worker ms/ses':>14}{'server ms/ses':>14}{'commits/ses':>13}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        row("sqlite, 1 worker", await run_sqlite(str(Path(tmp) / "bench.db")))
    base = os.environ.get("TETHER_TEST_POSTGRES_URL")
    if not base:
        print('postgresql: skipped: set TETHER_TEST_POSTGRES_URL (eval "$(bash .ci/postgres.sh)")')
    else:
        for workers in WORKERS:
            label = f"postgresql, {workers} worker{'s' if workers > 1 else ''}"
            row(label, await run_postgres(base, workers))
    started = time.perf_counter()
    for _ in range(SESSIONS):
        await bare_loop(2)
    row("bare loop (no store)", time.perf_counter() - started)


if __name__ == "__main__":
    asyncio.run(main())
