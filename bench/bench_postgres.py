"""Throughput on PostgreSQL: events appended and sessions completed per second with 1, 2 and
4 worker processes, beside one worker on SQLite doing the same sessions.

Each session is the same scripted turn (two `write` calls, then an answer: 11 events after
its two creation events). The sessions are created first; the clock runs from the moment
they are all marked runnable (the workers already listening) until every turn has ended.
Needs TETHER_TEST_POSTGRES_URL (`eval "$(bash .ci/postgres.sh)"`); prints and never fails
on time. The bare loop (no store, no runtime) doing the same turns is printed beside.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(ROOT))

from psycopg import AsyncConnection  # noqa: E402
from tests.postgres.pg_worker import create_sessions, first_reply, make_tools  # noqa: E402

from common import bare_loop  # noqa: E402
from tether.agent import Agent  # noqa: E402
from tether.store.postgres import PostgresStore  # noqa: E402
from tether.store.sqlite import SQLiteStore  # noqa: E402
from tether.testing import ScriptedModel, call  # noqa: E402

SESSIONS = int(os.environ.get("BENCH_SESSIONS", "400"))
CONCURRENCY = 16  # sessions each worker runs at once


async def _fresh_schema(base: str) -> tuple[str, str]:
    schema = f"bench_{secrets.token_hex(4)}"
    async with await AsyncConnection.connect(base, autocommit=True) as conn:
        await conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in base else "?"
    return schema, f"{base}{sep}options=-csearch_path%3D{schema}"


async def _drop_schema(base: str, schema: str) -> None:
    async with await AsyncConnection.connect(base, autocommit=True) as conn:
        await conn.execute(f"DROP SCHEMA {schema} CASCADE")


async def run_postgres(base: str, workers: int) -> tuple[float, int]:
    schema, url = await _fresh_schema(base)
    store = PostgresStore(url)
    try:
        ids = await create_sessions(store, ["write twice"] * SESSIONS)
        await store.execute("DELETE FROM tether_wakeups", ())  # marked again below, timed
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.postgres.pg_worker",
                url,
                os.devnull,
                "--fast",
                "--concurrency",
                str(CONCURRENCY),
                "--ttl",
                "30",
                cwd=ROOT,
            )
            for _ in range(workers)
        ]
        while True:  # every worker is listening before the clock starts
            row = await store.fetch_one(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%%' "
                "AND application_name = '' AND datname = current_database()",
                (),
            )
            if row is not None and int(row[0]) >= workers:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        started = time.perf_counter()
        await store.execute(
            "SELECT tether_mark(session_id) FROM tether_sessions ORDER BY created", ()
        )
        while True:
            row = await store.fetch_one(
                "SELECT count(*), sum(last_seq) FROM tether_sessions WHERE last_type = 'turn.ended'",
                (),
            )
            if row is not None and int(row[0]) == len(ids):
                break
            await asyncio.sleep(0.01)
        took = time.perf_counter() - started
        events = int(row[1]) - 2 * len(ids)
        for proc in procs:
            proc.kill()
            await proc.wait()
        return took, events
    finally:
        await store.close()
        await _drop_schema(base, schema)


async def run_sqlite_one_worker(path: str) -> tuple[float, int]:
    store = SQLiteStore(path)
    ids = await create_sessions(store, ["write twice"] * SESSIONS)  # type: ignore[arg-type]
    model = ScriptedModel([first_reply, call("write", n=2), "done"])  # type: ignore[list-item]
    agent = Agent(model, tools=make_tools(os.devnull, slow=False), store=store, lease_ttl=30)
    started = time.perf_counter()
    running: set[asyncio.Task[None]] = set()

    async def one(sid: str) -> None:
        await agent.run(None, session_id=sid)

    pending = list(ids)
    while pending or running:
        while pending and len(running) < CONCURRENCY:
            task = asyncio.create_task(one(pending.pop(0)))
            running.add(task)
            task.add_done_callback(running.discard)
        await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
    took = time.perf_counter() - started
    events = sum((await store.last_seqs(ids)).values()) - 2 * len(ids)
    await agent.close()
    return took, events


async def main() -> None:
    base = os.environ.get("TETHER_TEST_POSTGRES_URL")
    if not base:
        print(
            'bench_postgres: skipped: set TETHER_TEST_POSTGRES_URL (eval "$(bash .ci/postgres.sh)")'
        )
        return
    print(
        f"{SESSIONS} sessions of one turn (2 write calls, 11 events each); {CONCURRENCY} at once per worker"
    )
    print(f"{'backend':<24}{'seconds':>9}{'events/s':>11}{'sessions/s':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        took, events = await run_sqlite_one_worker(str(Path(tmp) / "bench.db"))
    print(f"{'sqlite, 1 worker':<24}{took:>9.2f}{events / took:>11.0f}{SESSIONS / took:>12.1f}")
    for workers in (1, 2, 4):
        took, events = await run_postgres(base, workers)
        label = f"postgresql, {workers} worker{'s' if workers > 1 else ''}"
        print(f"{label:<24}{took:>9.2f}{events / took:>11.0f}{SESSIONS / took:>12.1f}")
    started = time.perf_counter()
    for _ in range(SESSIONS):
        await bare_loop(2)
    took = time.perf_counter() - started
    print(f"{'bare loop (no store)':<24}{took:>9.2f}{'':>11}{SESSIONS / took:>12.1f}")


if __name__ == "__main__":
    asyncio.run(main())
