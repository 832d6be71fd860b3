"""`tether review FILE --proposer MODEL --critic MODEL ...`, run for real with scripted
participants: the ledger printed, the revision written, the exit code by stop reason, and
bad input refused in one line before the store is touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from review import participants as p

TESTS = str(Path(__file__).resolve().parent.parent)  # where `review.participants` lives
M = "python:review.participants:"


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in ("TETHER_STORE", p.CALLS_ENV)}
    return {**out, "PYTHONPATH": TESTS, **extra}


def tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd, env=env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    path = tmp_path / "plan.md"
    path.write_text(p.ARTIFACT)
    return path


def test_a_review_that_converges_prints_its_ledger_writes_the_revision_and_exits_0(
    plan: Path,
) -> None:
    out = tether(
        "review", "plan.md", "--proposer", f"{M}shortening_model",
        "--critic", f"{M}stubborn_model", "--critic", f"{M}wordy_model",
        "--store", "sqlite:///r.db",
        cwd=plan.parent,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "stop: converged" in lines[0]
    assert "0 open, 1 rejected, 1 accepted" in lines[0]
    assert lines[1:4] == [
        "  critic1#1  accepted  The introduction is too long.",
        "  critic2#1  rejected  Missing tests.",
        "                       reason: out of scope",
    ]
    assert "critic1: 1 raised, 2 repeated · 1 accepted, 0 rejected, 0 open" in lines
    assert lines[-1] == "wrote plan.md.reviewed"
    revised = (plan.parent / "plan.md.reviewed").read_text()
    assert revised == "The plan: a short introduction, then the steps.\n"
    assert plan.read_text() == p.ARTIFACT  # the original is left as it was


def test_critics_that_never_settle_exit_3_at_max_rounds(plan: Path) -> None:
    out = tether(
        "review", "plan.md", "--proposer", f"{M}shortening_model",
        "--critic", f"{M}restless_model", "--max-rounds", "2",
        "--out", "revised.md", "--store", "sqlite:///r.db", "--json",
        cwd=plan.parent,
    )  # fmt: skip
    assert out.returncode == 3, out.stderr
    result = json.loads(out.stdout)
    assert (result["stop_reason"], result["rounds"]) == ("max_rounds", 2)
    assert [o["id"] for o in result["ledger"]] == ["critic1#1", "critic1#2"]
    assert result["out"] == "revised.md"
    assert (plan.parent / "revised.md").read_text() == p.ARTIFACT


@pytest.mark.parametrize(
    ("flags", "stop", "code"),
    [
        (["--critic", f"{M}garbled_model"], "malformed", 1),
        (["--critic", f"{M}stubborn_model", "--max-steps", "2"], "budget", 3),
    ],
)
def test_the_exit_code_says_how_the_review_stopped(
    plan: Path, flags: list[str], stop: str, code: int
) -> None:
    out = tether(
        "review", "plan.md", "--proposer", f"{M}shortening_model", *flags,
        "--store", "sqlite:///r.db", "--json",
        cwd=plan.parent,
    )  # fmt: skip
    assert out.returncode == code, out.stderr
    assert json.loads(out.stdout)["stop_reason"] == stop


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.md"], "missing.md: cannot read it"),
        (["plan.md", "--max-rounds", "0"], "--max-rounds: must be a whole number 1 or more"),
        (["plan.md", "--max-cost", "-1"], "--max-cost: must be a number above 0, not -1"),
        (["plan.md", "--out", "nowhere/x.md"], "--out nowhere/x.md: no directory nowhere"),
        (["plan.md", "--critic", "python:nosuchmodule:x"], "--critic python:nosuchmodule:x"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_with_nothing_stored(
    plan: Path, args: list[str], message: str
) -> None:
    out = tether(
        "review", *args, "--proposer", f"{M}shortening_model",
        "--critic", f"{M}stubborn_model", "--store", "sqlite:///r.db",
        cwd=plan.parent,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.startswith("tether: error: ") and message in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (plan.parent / "r.db").exists()


def test_ctrl_c_stops_the_review_interrupted_prints_the_ledger_and_exits_130(plan: Path) -> None:
    called = plan.parent / "called"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "tether", "review", "plan.md",
            "--proposer", f"{M}shortening_model", "--critic", f"{M}hanging_model",
            "--store", "sqlite:///r.db", "--json",
        ],
        cwd=plan.parent, env=env(**{p.CALLS_ENV: str(called)}),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not called.exists():  # the critic's model was asked
            assert proc.poll() is None and time.monotonic() < deadline, "no critic started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert json.loads(stdout)["stop_reason"] == "interrupted"
    assert "tether: interrupted (session ses_" in stderr
    assert (plan.parent / "plan.md.reviewed").read_text() == p.ARTIFACT
