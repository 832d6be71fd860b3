"""A new turn of a long session: the time from `Agent.run(..., session_id=)` to the new
turn's first model call, and the peak RSS of the process, for sessions of 1,000, 10,000 and
100,000 events on SQLite, each figure beside the 1,000-event one.

- same process: the process that ran the turn before runs the next (it starts from the
  fold it kept, caught up with the store);
- fresh process: a new process runs it (the session's snapshot and the events after it);
- after SIGKILL: a process that ran a turn is killed, its store never closed, and a new
  process runs the next turn.

Targets (issue 33): ≤ 100 ms in the same process, ≤ 500 ms fresh or after a kill, and peak
RSS ≤ twice the 1,000-event session's.

    .venv/bin/python bench/bench_turns.py [EVENTS ...]
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tether import Agent, Limits
from tether.events import (
    ModelRequested,
    ModelResponded,
    Payload,
    SessionCreated,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UserMessage,
)
from tether.messages import Message, Text, ToolCall, Usage, user
from tether.providers.base import ModelRequest, ModelResponse
from tether.session.log import SessionLog, new_session_id
from tether.store import SQLiteStore, Store
from tether.testing import ScriptedModel

STEPS_PER_TURN = 10
BATCH = 1_000


class TimedModel(ScriptedModel):
    """Answers "done", noting when it was first asked (wall clock, and this process's CPU
    time: on a shared machine the second says what the first would be on an idle one)."""

    def __init__(self) -> None:
        super().__init__(["done"], repeat_last=True)
        self.first_call: tuple[float, float] | None = None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if self.first_call is None:
            self.first_call = (time.perf_counter(), time.process_time())
        return await super().complete(request)


def turn(i: int) -> list[Payload]:
    """One closed turn: a question, STEPS_PER_TURN tool steps, an answer."""
    out: list[Payload] = [UserMessage(user(f"question {i}: " + "q" * 80))]
    for s in range(STEPS_PER_TURN):
        call = ToolCall(f"call_{i}_{s}", "echo", {"text": f"line {s} " + "x" * 60})
        out += [
            ModelRequested("scripted", f"{i:032x}{s:032x}", 100),
            ModelResponded(
                Message("assistant", (Text(f"step {s}"), call)), "tool_calls", usage=Usage(100, 20)
            ),
            ToolStarted(call.id, "echo", "read"),
            ToolFinished(call.id, "ok", f"line {s} " + "y" * 200, 0.1),
        ]
    out += [
        ModelRequested("scripted", f"{i:064x}", 100),
        ModelResponded(Message("assistant", (Text(f"answer {i}"),)), usage=Usage(100, 20)),
        TurnEnded("end_turn"),
    ]
    return out


async def write_turns(store: Store, events: int) -> SessionLog:
    """A session of about `events` events in closed turns, appended in batches as a run
    commits them, its snapshots written as they come due."""
    log = SessionLog(store, new_session_id())
    pending: list[Payload] = [SessionCreated(model="scripted")]
    i = 0
    while log.folder.last_seq + len(pending) < events:
        pending += turn(i)
        i += 1
        if len(pending) >= BATCH:
            await log.append(*pending)
            pending = []
            if log._snapshots is not None:
                await log._snapshots.settle()  # a run's commits are spaced; these are not
    if pending:
        await log.append(*pending)
    if log._snapshots is not None:
        await log._snapshots.settle()
    return log


async def build(path: str, events: int) -> tuple[str, int]:
    """A session of about `events` events written by `write_turns`; its id and how many
    events came after its newest snapshot."""
    store = SQLiteStore(path)
    log = await write_turns(store, events)
    found = await store.get_snapshot(log.session_id)
    await store.close()
    return log.session_id, log.folder.last_seq - (0 if found is None else found.seq)


async def timed_turn(agent: Agent, model: TimedModel, session_id: str) -> tuple[float, float]:
    """Seconds from `Agent.run` to the first model call: wall clock, CPU."""
    model.first_call = None
    t0, c0 = time.perf_counter(), time.process_time()
    result = await agent.run("one more question", session_id=session_id)
    assert result.output == "done", result
    assert model.first_call is not None
    return model.first_call[0] - t0, model.first_call[1] - c0


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def child(path: str, session_id: str, mode: str) -> None:
    """In a process of its own: `fresh` times a turn, then the next one in the same process;
    `kill` runs a turn and dies by SIGKILL, its store left open."""
    store = SQLiteStore(path)
    model = TimedModel()
    agent = Agent(model, store=store, context=False, limits=Limits(max_steps=None))
    fresh = await timed_turn(agent, model, session_id)
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    fresh_rss = peak_rss_mib()
    same = await timed_turn(agent, model, session_id)
    await agent.close()
    figures = {"rss": fresh_rss, "rss_after": peak_rss_mib()}
    for name, (wall, cpu) in (("fresh", fresh), ("same", same)):
        figures[name], figures[f"{name}_cpu"] = wall, cpu
    print(json.dumps(figures))


def run_child(path: str, session_id: str, mode: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", path, session_id, mode],
        capture_output=True,
        text=True,
        check=False,
    )
    if mode == "kill":
        assert done.returncode == -signal.SIGKILL, done.stderr
        return {}
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def measure(events: int, directory: Path) -> dict[str, float]:
    path = str(directory / f"turns-{events}.db")
    session_id, tail = asyncio.run(build(path, events))
    first = run_child(path, session_id, "fresh")  # a fresh process, then the same one again
    run_child(path, session_id, "kill")
    after_kill = run_child(path, session_id, "fresh")
    return {
        "events": events,
        "tail": tail,
        "same": first["same"],
        "fresh": first["fresh"],
        "killed": after_kill["fresh"],
        "same_cpu": first["same_cpu"],
        "fresh_cpu": first["fresh_cpu"],
        "killed_cpu": after_kill["fresh_cpu"],
        "rss": max(first["rss_after"], after_kill["rss"]),
    }


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [1_000, 10_000, 100_000]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(n, Path(tmp)) for n in sizes]
    base = rows[0]
    print(
        f"a new turn's first model call after Agent.run(session_id=), SQLite; × = / {base['events']:,} events"
    )
    print(
        f"{'events':>9} {'tail':>6} {'same process':>31} {'fresh process':>31} {'after SIGKILL':>31} {'peak RSS':>18}"
    )
    for r in rows:
        cells = [
            f"{r[k] * 1e3:7.1f} ms ({r[k] / base[k]:5.1f}×) cpu {r[k + '_cpu'] * 1e3:6.1f}"
            for k in ("same", "fresh", "killed")
        ]
        rss = f"{r['rss']:6.0f} MiB ({r['rss'] / base['rss']:4.1f}×)"
        print(
            f"{r['events']:>9,} {r['tail']:>6,} {cells[0]:>31} {cells[1]:>31} {cells[2]:>31} {rss:>18}"
        )
    print("targets: same ≤ 100 ms, fresh and after SIGKILL ≤ 500 ms, peak RSS ≤ 2× the first row's")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(child(sys.argv[2], sys.argv[3], sys.argv[4]))
    else:
        main()
