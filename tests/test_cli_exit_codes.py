"""`tether run` exits by how its turn ended, run for real as a subprocess: 0 answered, 1 an
error, 2 bad input, 3 a limit, 4 waiting for approval (the commands that decide on stderr),
130 interrupted. Errors from a real HTTP backend are in tests/providers/test_retry_loopback.py;
5, a store that fails after the run stored events, in tests/test_cli_disk_full.py."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tether.cli.common import exit_code
from tether.store import SQLiteStore

SCENARIOS = """
from tether import tool
from tether.testing import Hang, ScriptedModel, Truncated, call

answers = ScriptedModel(["done"])
truncated = ScriptedModel([Truncated("I will call")])
hangs = ScriptedModel([Hang()])
pays = ScriptedModel([call("pay", amount=1), "paid"])


@tool(effect="write", needs_approval=True)
def pay(amount: int) -> str:
    '''Pay.'''
    return f"paid {amount}"
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "scenarios.py").write_text(SCENARIOS)
    return tmp_path


def _env(cwd: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(cwd), env.get("PYTHONPATH")]))
    return env


def tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        env=_env(cwd),
        capture_output=True,
        text=True,
        timeout=120,
    )


def run(*args: str, cwd: Path) -> tuple[int, dict[str, object], str]:
    out = tether("run", "go", "--json", *args, cwd=cwd)
    return out.returncode, json.loads(out.stdout) if out.stdout else {}, out.stderr


def test_an_answer_exits_0(workdir: Path) -> None:
    code, result, err = run("--model", "python:scenarios:answers", cwd=workdir)
    assert (code, result["stop_reason"], result["output"]) == (0, "end_turn", "done"), err


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--model", "scripted:demo", "--max-steps", "1"], "turn_limit"),
        (["--model", "python:scenarios:truncated"], "output_limit"),
        (["--model", "scripted:demo", "--max-tokens", "1"], "budget"),
        (["--model", "python:scenarios:hangs", "--max-seconds", "0.5"], "time_limit"),
    ],
)
def test_a_limit_exits_3(workdir: Path, args: list[str], reason: str) -> None:
    code, result, err = run(*args, cwd=workdir)
    assert (code, result["stop_reason"]) == (3, reason), err


def test_waiting_for_approval_exits_4_and_prints_the_commands_that_decide(workdir: Path) -> None:
    code, result, err = run(
        "--model", "python:scenarios:pays", "--tools", "scenarios:pay", cwd=workdir
    )
    assert (code, result["stop_reason"]) == (4, "awaiting_approval"), err
    approve = next(line.split() for line in err.splitlines() if "sessions approve" in line)
    assert approve[:4] == ["tether", "sessions", "approve", result["session_id"]]

    # The printed command works as printed, and the run then goes on to its answer.
    assert tether(*approve[1:], cwd=workdir).returncode == 0
    resumed = tether("sessions", "resume", str(result["session_id"]), "--json", cwd=workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["output"] == "paid"


async def _wait_for_model_request(db: Path) -> str:
    """The id of the session whose model request is open, once the run has sent it."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if await asyncio.to_thread(db.exists):
            store = SQLiteStore(str(db))
            try:
                for info in await store.sessions(limit=1):
                    events = await store.read(info.session_id)
                    if any(e.type == "model.requested" for e in events):
                        return info.session_id
            finally:
                await store.close()
        await asyncio.sleep(0.1)
    raise AssertionError("the run never asked its model")


def _start_hanging_run(workdir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tether", "run", "go", "--model", "python:scenarios:hangs"],
        cwd=workdir,
        env=_env(workdir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_ctrl_c_exits_130(workdir: Path) -> None:
    process = _start_hanging_run(workdir)
    try:
        await _wait_for_model_request(workdir / "tether.db")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err


async def test_an_interrupt_from_another_process_exits_130(workdir: Path) -> None:
    process = _start_hanging_run(workdir)
    try:
        session_id = await _wait_for_model_request(workdir / "tether.db")
        assert tether("sessions", "interrupt", session_id, cwd=workdir).returncode == 0
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "stop: interrupted" in out


def test_bad_input_exits_2(workdir: Path) -> None:
    code, result, err = run("--model", "python:scenarios:nothing_here", cwd=workdir)
    assert (code, result) == (2, {}) and err.startswith("tether: error:")


def test_a_custom_stop_condition_counts_as_an_answer() -> None:
    assert exit_code("found_it") == 0
    assert [exit_code(r) for r in ("end_turn", "error", "awaiting_approval", "interrupted")] == [
        0,
        1,
        4,
        130,
    ]


def test_an_experiment_with_an_errored_run_exits_1(workdir: Path) -> None:
    (workdir / "broken.py").write_text(
        "from tether.errors import ServerError\n"
        "from tether.testing import Fail, ScriptedModel\n"
        "model = ScriptedModel([Fail(ServerError('down', status=500, retryable=False))])\n"
    )
    failed = tether(
        "experiment", "go", "--model", "python:broken:model", "--runs", "2", "--json", cwd=workdir
    )
    assert failed.returncode == 1 and "2 of 2 runs ended in error" in failed.stderr
    assert json.loads(failed.stdout)["outcomes"]["error"]["count"] == 2
    fine = tether(
        "experiment", "go", "--model", "python:scenarios:answers", "--runs", "2", cwd=workdir
    )
    assert fine.returncode == 0, fine.stderr
