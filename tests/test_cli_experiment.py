"""`tether experiment` as it runs, through the real command: a running tally on stderr (a
line redrawn in place on a terminal, plain lines otherwise), and on Ctrl-C the report of the
runs that ended, exit 130."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tether.store import SQLiteStore

# The first two runs answer; every later one waits for its model until it is interrupted
# (two at once: each must close its turn before the store is closed).
SOMETIMES = """
import itertools

from tether.testing import ScriptedModel
from tether.testing.scripted import Hang

asked = itertools.count()
model = ScriptedModel([lambda messages: "done" if next(asked) < 2 else Hang()])
answers = ScriptedModel(["done"])
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "sometimes.py").write_text(SOMETIMES)
    return tmp_path


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tether", "experiment", "go", *args]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}


async def wait_for_a_hanging_run(db: Path) -> None:
    """Until the third run has asked its model (the first two have ended)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if await asyncio.to_thread(db.exists):
            store = SQLiteStore(str(db))
            try:
                sessions = await store.sessions(limit=10)
                if len(sessions) >= 3:
                    events = await store.read(sessions[0].session_id)
                    if any(e.type == "model.requested" for e in events):
                        return
            finally:
                await store.close()
        await asyncio.sleep(0.05)
    raise AssertionError("the third run never asked its model")


def start(workdir: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command("--model", "python:sometimes:model", "--runs", "5", "--concurrency", "2", *args),
        cwd=workdir, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


async def interrupted(workdir: Path, *args: str) -> tuple[str, str]:
    process = start(workdir, *args)
    try:
        await wait_for_a_hanging_run(workdir / "tether.db")
        process.send_signal(signal.SIGINT)
        out, err = await asyncio.to_thread(process.communicate, timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "Traceback" not in err, err
    return out, err


async def test_ctrl_c_prints_the_report_of_the_runs_that_ended(workdir: Path) -> None:
    out, err = await interrupted(workdir)
    assert out.startswith("interrupted: a partial report of the 2 of 5 runs that ended\n")
    assert "end_turn            2/2" in out and "sessions ses_" in out
    # Not a terminal: plain progress lines, the first run's at once.
    assert "tether: 1/5 runs · end_turn 1 · " in err.splitlines()[0]


async def test_ctrl_c_with_json_prints_the_partial_report_as_json(workdir: Path) -> None:
    out, _ = await interrupted(workdir, "--json")
    report = json.loads(out)
    assert (report["interrupted"], report["runs"], report["runs_asked"]) == (True, 2, 5)
    assert report["outcomes"]["end_turn"]["count"] == 2


def test_on_a_terminal_the_tally_is_one_line_redrawn_in_place(workdir: Path) -> None:
    main, side = pty.openpty()
    process = subprocess.Popen(
        command("--model", "python:sometimes:answers", "--runs", "3"),
        cwd=workdir, env=env(), stdout=subprocess.PIPE, stderr=side, text=True,
    )  # fmt: skip
    os.close(side)
    seen = b""
    while True:
        try:
            piece = os.read(main, 4096)
        except OSError:  # the other end closed
            break
        if not piece:
            break
        seen += piece
    os.close(main)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    shown = seen.decode()
    assert "\r\x1b[K" in shown and "███" in shown and "3/3 runs · end_turn 3 · " in shown
    assert "tether: " not in shown  # no plain lines on a terminal
    assert out.startswith("experiment exp_")  # the report itself on stdout, as before
