"""Ctrl-C as users expect, through the real `tether run` and SIGINT: an async call is cancelled
at once; a sync call on a thread gets a short grace, then is abandoned and answered by the
recovery rules (a write: `unknown_effect`, with its real duration) without the process
waiting for its thread; a second Ctrl-C exits at once. Always 130, never a traceback."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from tether.cli.interrupts import ChatPresses
from tether.events import Event, ToolFinished, TurnEnded
from tether.recovery import ABANDONED
from tether.store import SQLiteStore
from tether.tools.run import SYNC_GRACE

SLOW_TOOLS = """
import asyncio
import time

from tether import tool
from tether.testing import ScriptedModel, call


@tool(effect="write")
def slow_write(text: str) -> str:
    '''Write, blocking its thread for half a minute.'''
    time.sleep(30)
    return "written"


@tool(effect="read")
async def slow_read() -> str:
    '''Read for half a minute without blocking.'''
    await asyncio.sleep(30)
    return "read"


writes = ScriptedModel([call("slow_write", text="x"), "done"])
reads = ScriptedModel([call("slow_read"), "done"])
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "slow.py").write_text(SLOW_TOOLS)
    return tmp_path


def start(workdir: Path, model: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    return subprocess.Popen(
        [sys.executable, "-m", "tether", "run", "go", "--model", f"python:slow:{model}",
         "--tools", "slow:slow_write,slow:slow_read"],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


async def read_log(db: Path) -> list[Event]:
    if not await asyncio.to_thread(db.exists):
        return []
    store = SQLiteStore(str(db))
    try:
        sessions = await store.sessions(limit=1)
        return await store.read(sessions[0].session_id) if sessions else []
    finally:
        await store.close()


async def wait_for_the_call(db: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(e.type == "tool.started" for e in await read_log(db)):
            await asyncio.sleep(0.2)  # the call is under way in its thread or task
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the call never started")


async def interrupt(workdir: Path, model: str, times: int = 1) -> tuple[float, float, str]:
    """Start a run, Ctrl-C it `times` times once its call runs: when the first Ctrl-C was
    sent (epoch seconds), how long the process took to exit after the last, its stderr."""
    process = start(workdir, model)
    try:
        await wait_for_the_call(workdir / "tether.db")
        sent = time.time()
        for i in range(times):
            if i:
                await asyncio.sleep(0.2)
            process.send_signal(signal.SIGINT)
        last = time.monotonic()
        _, err = await asyncio.to_thread(process.communicate, timeout=60)
        took = time.monotonic() - last
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "Traceback" not in err, err
    return sent, took, err


def parse_time(text: str) -> float:
    return datetime.strptime(text + "+0000", "%Y-%m-%dT%H:%M:%S.%fZ%z").timestamp()


def finished_after(events: list[Event], sent: float) -> tuple[ToolFinished, float]:
    (event,) = [e for e in events if isinstance(e.payload, ToolFinished)]
    assert isinstance(event.payload, ToolFinished)
    return event.payload, parse_time(event.time) - sent


async def test_a_sync_write_is_abandoned_after_the_grace_with_its_real_duration(
    workdir: Path,
) -> None:
    sent, took, err = await interrupt(workdir, "writes")
    assert took < SYNC_GRACE + 5, "the process waited for the tool's thread"
    events = await read_log(workdir / "tether.db")
    finished, answered_after = finished_after(events, sent)
    assert (finished.outcome, finished.content) == ("unknown_effect", ABANDONED)
    assert answered_after >= SYNC_GRACE - 0.05  # the thread had its grace
    assert finished.duration_ms >= (SYNC_GRACE + 0.2) * 1000  # it ran before the Ctrl-C too
    assert [e.payload.stop_reason for e in events if isinstance(e.payload, TurnEnded)] == [
        "interrupted"
    ]
    assert f"session {events[0].session_id}" in err


async def test_an_async_call_is_cancelled_at_once(workdir: Path) -> None:
    sent, took, _ = await interrupt(workdir, "reads")
    assert took < 5
    events = await read_log(workdir / "tether.db")
    finished, answered_after = finished_after(events, sent)
    assert finished.outcome == "canceled" and finished.duration_ms > 200
    assert answered_after < SYNC_GRACE  # no grace: a task is cancelled where it waits
    assert events[-1].type == "turn.ended"


async def test_a_second_ctrl_c_exits_at_once(workdir: Path) -> None:
    _, took, err = await interrupt(workdir, "writes", times=2)
    assert took < SYNC_GRACE, "the second Ctrl-C waited for the grace"
    assert "quitting now" in err


def test_what_a_ctrl_c_means_in_a_chat() -> None:
    now = [100.0]
    presses = ChatPresses(clock=lambda: now[0])
    assert presses.press(turn_running=False, stopping=False) == "prompt"
    now[0] += 1.5  # more than a second later: a first press again
    assert presses.press(turn_running=True, stopping=False) == "interrupt"
    now[0] += 0.9
    assert presses.press(turn_running=False, stopping=False) == "leave"  # within a second

    presses.forget()  # a turn started since: its first Ctrl-C interrupts it
    now[0] += 0.1
    assert presses.press(turn_running=True, stopping=False) == "interrupt"
    now[0] += 5
    # Long after, but the turn it interrupted is still stopping: leave.
    assert presses.press(turn_running=True, stopping=True) == "leave"
