"""What each durability setting costs a lone session: microseconds per step of one tether
session on SQLite with `synchronous=normal` (the default) and `full`, beside SQLite's own
floor (the same step's rows, already encoded, inserted in 1, 2 or 3 commits: no tether at all)
and the bare loop. With TETHER_TEST_POSTGRES_URL set, the same session on PostgreSQL with
`synchronous_commit=on` and `off` too. Each figure is the median of several runs; run it two
or three times on a shared machine and read the range. Never fails on time.

    .venv/bin/python bench/bench_durability.py
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import bare_loop
from tether import Agent, Limits, tool
from tether.events import Event
from tether.store import MemoryStore, Store, open_store
from tether.store.base import EventRow, event_to_row
from tether.store.sqlite_format import SCHEMA as _SCHEMA
from tether.testing import ScriptedModel, call

STEPS = 50


@tool(effect="read")
async def echo(text: str) -> str:
    """Say it back."""
    return text


async def tether_run(store: Store) -> None:
    model = ScriptedModel([*([call("echo", text="hi")] * STEPS), "done"])
    agent = Agent(model, tools=[echo], store=store, limits=Limits(max_steps=STEPS + 5))
    result = await agent.run("go")
    assert result.stop_reason == "end_turn", result


def median_per_step(samples: list[float]) -> float:
    return statistics.median(samples) / STEPS * 1e6


async def timed(run: Callable[[], Awaitable[None]], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        await run()
        samples.append(time.perf_counter() - t0)
    return median_per_step(samples)


async def step_rows() -> list[EventRow]:
    """One step of a real session as the store receives it: the events from one
    `model.requested` to the next, as rows (tether's own encoding, done here, not timed)."""
    store = MemoryStore()
    await tether_run(store)
    events: list[Event] = await store.read((await store.sessions(1))[0].session_id)
    starts = [i for i, e in enumerate(events) if e.type == "model.requested"]
    return [event_to_row(e) for e in events[starts[10] : starts[11]]]


def sqlite_floor(path: Path, synchronous: str, step: list[EventRow], commits: int) -> float:
    """The step's rows appended STEPS times with raw sqlite3, split into `commits`
    transactions per step; µs per step."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.executescript(_SCHEMA)
    cuts = [round(i * len(step) / commits) for i in range(commits + 1)]
    parts = [step[a:b] for a, b in itertools.pairwise(cuts)]
    insert = (
        "INSERT INTO events (session_id, seq, id, time, thread, type, data) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
    samples = []
    for run in range(10):
        session = f"floor-{run}"
        seq = 0
        t0 = time.perf_counter()
        for _ in range(STEPS):
            for part in parts:
                conn.execute("BEGIN IMMEDIATE")
                for row in part:
                    seq += 1
                    conn.execute(insert, (session, seq, *row[2:]))
                conn.execute("COMMIT")
        samples.append(time.perf_counter() - t0)
    conn.close()
    return median_per_step(samples)


async def postgres_rows(base: str) -> list[tuple[str, float]]:
    from psycopg import AsyncConnection

    rows = []
    schema = f"bench_{secrets.token_hex(4)}"
    async with await AsyncConnection.connect(base, autocommit=True) as conn:
        await conn.execute(f"CREATE SCHEMA {schema}")
    try:
        sep = "&" if "?" in base else "?"
        for mode in ("on", "off"):
            url = f"{base}{sep}options=-csearch_path%3D{schema}&synchronous_commit={mode}"
            store = open_store(url)
            await tether_run(store)  # migrates, warms the pool
            rows.append(
                (
                    f"PostgreSQL, synchronous_commit={mode}",
                    await timed(lambda s=store: tether_run(s), 5),
                )
            )
            await store.close()
    finally:
        async with await AsyncConnection.connect(base, autocommit=True) as conn:
            await conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return rows


async def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    step = await step_rows()
    print(
        f"µs per step of one lone session ({STEPS}-step runs; a step is {len(step)} events), "
        f"files in {tmp}\n"
    )
    figures: list[tuple[str, float]] = []
    figures.append(("bare asyncio loop", await timed(lambda: bare_loop(STEPS), 50)))
    for mode, repeats in (("normal", 15), ("full", 5)):
        store = open_store(f"sqlite:///{tmp / f'tether-{mode}.db'}?synchronous={mode}")
        await tether_run(store)
        figures.append(
            (
                f"tether, SQLite synchronous={mode}",
                await timed(lambda s=store: tether_run(s), repeats),
            )
        )
        await store.close()
    for mode in ("NORMAL", "FULL"):
        for commits in (1, 2, 3):
            path = tmp / f"floor-{mode}-{commits}.db"
            figures.append(
                (
                    f"SQLite floor, {mode.lower()}, {commits} commit(s)/step",
                    sqlite_floor(path, mode, step, commits),
                )
            )
    base = os.environ.get("TETHER_TEST_POSTGRES_URL")
    if base:
        figures.extend(await postgres_rows(base))
    else:
        print("(PostgreSQL rows skipped: TETHER_TEST_POSTGRES_URL is not set)\n")
    bare = figures[0][1]
    for label, micros in figures:
        print(f"  {label:<42} {micros:9.1f} µs/step  {micros / bare:7.1f} × bare")


if __name__ == "__main__":
    asyncio.run(main())
