"""Per-step overhead of the loop on the memory and SQLite stores, beside a bare asyncio loop
doing the same work, and how the per-step cost grows with the history.

    .venv/bin/python bench/bench_loop.py
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import bare_loop
from tether import Agent, Limits, tool
from tether.events import Event
from tether.store import MemoryStore, SQLiteStore, Store
from tether.testing import ScriptedModel, call


@tool(effect="read")
async def echo(text: str) -> str:
    """Say it back."""
    return text


def scripted(steps: int) -> ScriptedModel:
    return ScriptedModel([*([call("echo", text="hi")] * steps), "done"])


async def tether_run(steps: int, store: Store, on_event=None) -> None:  # type: ignore[no-untyped-def]
    agent = Agent(
        scripted(steps),
        tools=[echo],
        store=store,
        limits=Limits(max_steps=steps + 5),
        on_event=on_event,
    )
    result = await agent.run("go")
    assert result.stop_reason == "end_turn", result


async def per_step(label: str, run, steps: int, repeats: int) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        await run()
        samples.append((time.perf_counter() - t0) / steps)
    best = statistics.median(samples)
    print(f"  {label:<28} {best * 1e6:9.1f} µs/step  (median of {repeats} runs of {steps} steps)")
    return best


async def overhead() -> None:
    steps = 50
    print(f"per-step cost, {steps}-step run (scripted model, one read tool per step)")
    tmp = Path(tempfile.mkdtemp())
    bare = await per_step("bare asyncio loop", lambda: bare_loop(steps), steps, 200)
    memory = await per_step(
        "tether, memory store", lambda: tether_run(steps, MemoryStore()), steps, 100
    )
    sqlite_store = SQLiteStore(str(tmp / "bench.db"))
    sqlite = await per_step(
        "tether, SQLite store", lambda: tether_run(steps, sqlite_store), steps, 30
    )
    await sqlite_store.close()
    print(f"  memory store / bare loop     {memory / bare:9.1f} ×   (target ≤ 5×)")
    print(f"  SQLite store                 {sqlite * 1e6:9.1f} µs/step (target ≤ 300 µs)")


async def growth() -> None:
    steps = 1000
    print(f"\nhistory growth, one {steps}-step session")
    for label, store in (
        ("memory", MemoryStore()),
        ("SQLite", SQLiteStore(str(Path(tempfile.mkdtemp()) / "g.db"))),
    ):
        marks: list[float] = []

        def mark(event: Event, marks: list[float] = marks) -> None:
            if event.type == "model.requested":
                marks.append(time.perf_counter())

        await tether_run(steps, store, on_event=mark)
        durations = [b - a for a, b in itertools.pairwise(marks)]
        first = statistics.median(durations[0:10])
        last = statistics.median(durations[990:1000])
        print(
            f"  {label:<7} steps 1–10 {first * 1e6:7.1f} µs, steps 991–1000 {last * 1e6:7.1f} µs: "
            f"ratio {last / first:.2f} (target ≤ 1.3)"
        )
        await store.close()


async def main() -> None:
    await overhead()
    await growth()


if __name__ == "__main__":
    asyncio.run(main())
