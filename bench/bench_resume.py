"""Resuming sessions from SQLite, beside a bare baseline that reads the same rows with
sqlite3 and json.loads.

1. One session of 10,000 events left by a worker that died while a read call ran: a fresh
   store and Agent load it, fold it, re-run the call, ask the model and close the turn.
   Target: under 0.2 s.
2. 1,000 sessions, each left by a dead worker mid-call with its lease expired: one Agent
   claims and resumes them all, in one `gather` and one after another (sessions per second).
   Baseline: per session, read its rows and parse them, then claim, append four events and
   release in plain sqlite3 transactions.

    .venv/bin/python bench/bench_resume.py [EVENTS] [SESSIONS]
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tether import Agent, Limits, tool
from tether.events import (
    ModelRequested,
    ModelResponded,
    Payload,
    SessionCreated,
    ToolFinished,
    ToolStarted,
    UserMessage,
)
from tether.fold import Folder
from tether.messages import Message, Text, ToolCall, Usage, user
from tether.session.log import SessionLog, new_session_id
from tether.store import SQLiteStore
from tether.testing import ScriptedModel

REPEATS = 5


@tool(effect="read")
async def echo(text: str) -> str:
    """Say it back."""
    return text


def model() -> ScriptedModel:
    return ScriptedModel(["done"], repeat_last=True)


def agent(store: SQLiteStore) -> Agent:
    # The context policy and the step limit are off: this measures resuming, not compacting
    # a long transcript or stopping a turn of thousands of steps.
    return Agent(model(), tools=[echo], store=store, context=False, limits=Limits(max_steps=None))


def history(steps: int) -> list[Payload]:
    """A session of `steps` tool steps whose last call was started and never answered."""
    created = SessionCreated(model="scripted", tools={"echo": echo.schema_hash})
    payloads: list[Payload] = [created, UserMessage(user("echo things, please"))]
    for i in range(steps):
        call = ToolCall(f"call_{i}_0", "echo", {"text": f"line {i} " + "x" * 40})
        payloads += [
            ModelRequested("scripted", f"{i:064x}", 100 + i),
            ModelResponded(
                Message("assistant", (Text(f"step {i}"), call)),
                "tool_calls",
                usage=Usage(100 + i, 20),
            ),
            ToolStarted(call.id, "echo", "read"),
        ]
        if i < steps - 1:
            payloads.append(ToolFinished(call.id, "ok", f"line {i} " + "x" * 40, 0.1))
    return payloads


async def write_sessions(path: str, payloads: list[Payload], count: int) -> list[str]:
    """`count` sessions holding `payloads`, each left with an expired lease of a dead worker."""
    store = SQLiteStore(path)
    ids = []
    for _ in range(count):
        log = SessionLog(store, new_session_id())
        for start in range(0, len(payloads), 1000):
            await log.append(*payloads[start : start + 1000])
        await store.claim(log.session_id, "dead-worker", ttl=0.001)
        ids.append(log.session_id)
    await store.close()
    await asyncio.sleep(0.01)  # the dead worker's leases expire
    return ids


def bare_read(path: str, session_id: str) -> int:
    conn = sqlite3.connect(path)
    rows = conn.execute(
        "SELECT seq, type, data FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
    ).fetchall()
    parsed = [json.loads(r[2]) for r in rows]
    conn.close()
    return len(parsed)


async def resume_one(path: str, session_id: str) -> tuple[float, float, float, int]:
    """(open + resume, read, fold) seconds, and the events after the resume."""
    t0 = time.perf_counter()
    store = SQLiteStore(path)
    a = agent(store)
    result = await a.resume(session_id)
    total = time.perf_counter() - t0
    assert result.stop_reason == "end_turn" and result.output == "done", result
    t1 = time.perf_counter()
    events = await store.read(session_id)
    read = time.perf_counter() - t1
    t2 = time.perf_counter()
    Folder().apply_all(events)
    folded = time.perf_counter() - t2
    await a.close()
    return total, read, folded, len(events)


async def long_session(events: int, directory: Path) -> None:
    steps = (events - 2) // 4 + 1
    payloads = history(steps)
    path = str(directory / "long.db")
    ids = await write_sessions(path, payloads, REPEATS)
    bare = [bare_read(path, sid) for sid in ids]  # warms the page cache too
    t0 = time.perf_counter()
    for sid in ids:
        bare_read(path, sid)
    bare_s = (time.perf_counter() - t0) / len(ids)
    runs = [await resume_one(path, sid) for sid in ids]
    total = statistics.median(r[0] for r in runs)
    read = statistics.median(r[1] for r in runs)
    folded = statistics.median(r[2] for r in runs)
    print(f"resume one session of {len(payloads):,} events (SQLite, median of {REPEATS})")
    print(f"  open store + Agent.resume to turn.ended {total * 1e3:8.1f} ms   (target < 200 ms)")
    print(f"    its load, timed apart: store.read     {read * 1e3:8.1f} ms")
    print(f"                           fold           {folded * 1e3:8.1f} ms")
    print(
        f"    the rest: open, claim, re-run, model, commits {max(0.0, total - read - folded) * 1e3:6.1f} ms"
    )
    print(f"  bare: sqlite3 SELECT + json.loads      {bare_s * 1e3:8.1f} ms   ({bare[0]:,} rows)")
    print(f"  resume / bare                          {total / bare_s:8.1f} ×")
    print(f"  events after the resume                {runs[0][3]:8,}")


def bare_claim_and_append(path: str, session_ids: list[str]) -> float:
    """Per session: read and parse its rows, then one transaction to claim, one to append
    four rows, one to release: the least a resume must do."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    t0 = time.perf_counter()
    for sid in session_ids:
        rows = conn.execute(
            "SELECT seq, data FROM events WHERE session_id = ? ORDER BY seq", (sid,)
        ).fetchall()
        [json.loads(r[1]) for r in rows]
        last = rows[-1][0]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE leases SET owner = 'bare', generation = generation + 1 WHERE session_id = ?",
            (sid,),
        )
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO events (session_id, seq, id, time, thread, type, data) "
            "VALUES (?, ?, ?, '2026-01-01T00:00:00.000000Z', '', 'x', '{}')",
            [(sid, last + k, f"bare_{sid}_{k}") for k in range(1, 5)],
        )
        conn.execute("COMMIT")
        conn.execute("UPDATE leases SET expires = 0 WHERE session_id = ?", (sid,))
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed


async def many_sessions(count: int, directory: Path) -> None:
    payloads = history(1)  # created, task, request, answer with a call, its start
    print(
        f"\nclaim and resume {count:,} interrupted sessions ({len(payloads)} events each, SQLite)"
    )
    for label, together in (("all at once (gather)", True), ("one after another", False)):
        path = str(directory / f"many-{together}.db")
        ids = await write_sessions(path, payloads, count)
        store = SQLiteStore(path)
        a = agent(store)
        t0 = time.perf_counter()
        if together:
            results = await asyncio.gather(*(a.resume(sid) for sid in ids))
        else:
            results = [await a.resume(sid) for sid in ids]
        elapsed = time.perf_counter() - t0
        assert all(r.stop_reason == "end_turn" for r in results)
        await a.close()
        print(f"  tether, {label:<22} {count / elapsed:9,.0f} sessions/s  ({elapsed:.2f} s)")
    path = str(directory / "many-bare.db")
    ids = await write_sessions(path, payloads, count)
    elapsed = bare_claim_and_append(path, ids)
    print(
        f"  bare sqlite3 read + claim + append  {count / elapsed:9,.0f} sessions/s  ({elapsed:.2f} s)"
    )


async def main() -> None:
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    sessions = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000
    with tempfile.TemporaryDirectory() as tmp:
        await long_session(events, Path(tmp))
        await many_sessions(sessions, Path(tmp))


if __name__ == "__main__":
    asyncio.run(main())
