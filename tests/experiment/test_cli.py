"""`tether experiment run SPEC | report ID | compare ID A B` through the real command: a spec
of variants and checked tasks, per-run records in `--json`, a chart, the report rebuilt
from the store, and an experiment killed half-way completed by running it again."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from experiment.fixtures import expected_passes
from tether.events import TurnEnded
from tether.store import SQLiteStore

TESTS = str(Path(__file__).resolve().parent.parent)  # where `experiment.fixtures` lives

FLAKY = """
runs = 40
seed = 5

[variants.a]
model = "python:experiment.fixtures:model"
tools = ["experiment.fixtures:reliable"]

[variants.b]
model = "python:experiment.fixtures:model"
tools = ["experiment.fixtures:unreliable"]

[[tasks]]
name = "fetch"
prompt = "Fetch the answer."
check = "experiment.fixtures:said_ok"
"""

STALLING = """
runs = 5
concurrency = 2

[variants.a]
model = "python:experiment.fixtures:stalling"

[variants.b]
model = "python:experiment.fixtures:stalling"
system = "Be brief."

[[tasks]]
prompt = "go"
"""


def env(**extra: str) -> dict[str, str]:
    made = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "EXPERIMENT_"))}
    made["PYTHONPATH"] = os.pathsep.join([TESTS, made.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return made | extra


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tether", "experiment", *args, "--store", "sqlite:///e.db"]


def tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*args), cwd=cwd, env=env(), capture_output=True, text=True, timeout=120
    )


def as_json(out: subprocess.CompletedProcess[str]) -> Any:
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_spec_run_compares_its_variants_and_keeps_a_record_per_run(tmp_path: Path) -> None:
    (tmp_path / "flaky.toml").write_text(FLAKY)
    out = tether("run", "flaky.toml", "--id", "flaky", "--json", "--chart", "c.svg", cwd=tmp_path)
    report = as_json(out)
    a, b = report["variants"]["a"], report["variants"]["b"]
    assert (a["runs"], b["runs"]) == (40, 40)
    assert a["passed"] == expected_passes(0.9, 1, 40)  # the spec's tools, seeded
    assert b["passed"] == expected_passes(0.5, 2, 40)
    # Not a terminal: plain progress lines with the running tally, the last one complete.
    assert out.stderr.startswith("tether: experiment flaky · 80 runs planned\n")
    assert f"tether: 80/80 runs · a {a['passed']}/40 passed · b {b['passed']}/40 passed" in (
        out.stderr
    )
    [comparison] = report["comparisons"]
    assert (comparison["a"], comparison["b"], comparison["verdict"]) == ("a", "b", "better")
    record = report["runs"][0]
    assert record.keys() >= {
        "session_id", "variant", "task", "repeat", "stop_reason", "passed", "score", "steps",
        "tokens", "cost_usd", "seconds",
    }  # fmt: skip
    assert (record["task"], record["stop_reason"], record["steps"]) == ("fetch", "end_turn", 2)
    assert record["passed"] == (record["score"] == 1.0)
    chart = (tmp_path / "c.svg").read_text()
    assert chart.startswith("<svg") and ">a</text>" in chart and ">b</text>" in chart

    # From the store alone: the same runs, checked again by the recorded checker.
    again = as_json(tether("report", "flaky", "--json", cwd=tmp_path))
    assert again["runs"] == report["runs"] and again["ran"] == 0
    compared = as_json(tether("compare", "flaky", "b", "a", "--json", cwd=tmp_path))
    assert compared["verdict"] == "worse" and compared["pairs"] == 40
    human = tether("compare", "flaky", "a", "b", cwd=tmp_path)
    assert "verdict  better (a against b)" in human.stdout
    text = tether("report", "flaky", cwd=tmp_path).stdout
    assert text.startswith("experiment flaky · 2 variant(s) × 1 task(s) × 40 run(s)")
    assert f"a         passed   {a['passed']:>5}/40" in text


async def finished_and_hanging(db: Path) -> tuple[int, int]:
    """How many runs of the stalling experiment ended, and how many wait for their model."""
    if not await asyncio.to_thread(db.exists):
        return 0, 0
    store = SQLiteStore(str(db))
    try:
        ended = hanging = 0
        for info in await store.sessions():
            events = await store.read(info.session_id)
            if any(isinstance(e.payload, TurnEnded) for e in events):
                ended += 1
            elif any(e.type == "model.requested" for e in events):
                hanging += 1
        return ended, hanging
    finally:
        await store.close()


def start_hanging_after(calls: int, cwd: Path) -> subprocess.Popen[str]:
    """The first process: its model answers `calls` calls, then hangs (2 runs at once)."""
    return subprocess.Popen(
        command("run", "stalling.toml", "--id", "cut", "--json"),
        cwd=cwd, env=env(EXPERIMENT_HANG_AFTER=str(calls)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


async def test_an_experiment_killed_half_way_runs_only_its_missing_runs_again(
    tmp_path: Path,
) -> None:
    (tmp_path / "stalling.toml").write_text(STALLING)
    first = start_hanging_after(4, tmp_path)
    try:
        deadline = time.monotonic() + 60
        while await finished_and_hanging(tmp_path / "e.db") != (4, 2):
            assert time.monotonic() < deadline, "the first process never got half-way"
            assert first.poll() is None, first.communicate()
            await asyncio.sleep(0.05)
        first.send_signal(signal.SIGKILL)  # no chance to close anything
        await asyncio.to_thread(first.communicate, timeout=60)
    finally:
        first.kill()

    report = as_json(tether("run", "stalling.toml", "--id", "cut", "--json", cwd=tmp_path))
    assert report["ran"] == 6 and report["missing"] == 0 and report["incomplete"] is None
    assert len(report["runs"]) == 10
    assert {(r["variant"], r["repeat"]) for r in report["runs"]} == {
        (v, i) for v in "ab" for i in range(5)
    }
    # The two runs the kill cut are kept aside, never counted; the four that ended count.
    assert [r["stop_reason"] for r in report["aside"]] == [None, None]
    assert await finished_and_hanging(tmp_path / "e.db") == (10, 2)
    # Complete now: running it once more runs nothing.
    assert (
        as_json(tether("run", "stalling.toml", "--id", "cut", "--json", cwd=tmp_path))["ran"] == 0
    )


async def test_ctrl_c_prints_the_report_so_far_and_the_rerun_counts_the_cut_runs_aside(
    tmp_path: Path,
) -> None:
    (tmp_path / "stalling.toml").write_text(STALLING)
    first = start_hanging_after(4, tmp_path)
    try:
        deadline = time.monotonic() + 60
        while await finished_and_hanging(tmp_path / "e.db") != (4, 2):
            assert time.monotonic() < deadline, "the first process never got half-way"
            await asyncio.sleep(0.05)
        first.send_signal(signal.SIGINT)
        out, err = await asyncio.to_thread(first.communicate, timeout=60)
    finally:
        first.kill()
    assert first.returncode == 130 and "Traceback" not in err, err
    partial = json.loads(out)
    assert len(partial["runs"]) == 4 and partial["missing"] == 6
    assert "`tether experiment run stalling.toml --id cut` runs what is missing" in err

    report = as_json(tether("run", "stalling.toml", "--id", "cut", "--json", cwd=tmp_path))
    assert report["ran"] == 6 and len(report["runs"]) == 10
    assert [r["stop_reason"] for r in report["aside"]] == ["interrupted", "interrupted"]


@pytest.mark.parametrize(
    ("args", "spec", "message"),
    [
        (("run", "nothing.toml"), None, "nothing.toml: cannot read it"),
        (("run", "s.toml"), "runs = 2\n[variants.a]\nmodel = 'scripted:demo'\n", "s.toml: tasks"),
        (("run", "s.toml"), FLAKY.replace("seed = 5", "sede = 5"), "s.toml: sede: Extra inputs"),
        (("run", "s.toml", "--chart", "c.png"), FLAKY, "--chart c.png: only SVG"),
        (
            ("run", "s.toml"),
            FLAKY.replace("python:experiment", "python:nowhere"),
            "s.toml: cannot import nowhere",
        ),
        (
            ("run", "s.toml"),
            FLAKY.replace("fixtures:said_ok", "fixtures:nothing"),
            "s.toml: check experiment.fixtures:nothing",
        ),
        (("run",), None, "usage: tether experiment run SPEC.toml"),
        (("compare", "x", "a"), None, "usage: tether experiment compare ID A B"),
        (("run", "s.toml", "--model", "scripted:demo"), FLAKY, "--model, --tools and --system"),
        (("go", "--runs", "2"), None, "tether experiment TASK needs --model"),
        (("report", "x", "--max-cost", "1"), None, "--id, --max-cost, --runs, --concurrency and"),
        (("run", "s.toml", "--tenant", "a/b"), FLAKY, "argument --tenant: tenant name 'a/b'"),
        (("compare", "x", "a", "b", "--chart", "c.svg"), None, "--chart is for `run`"),
    ],
)
def test_bad_input_is_one_line_and_stores_nothing(
    args: tuple[str, ...], spec: str | None, message: str, tmp_path: Path
) -> None:
    if spec is not None:
        (tmp_path / "s.toml").write_text(spec)
    out = tether(*args, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.startswith(f"tether: error: {message}"), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "e.db").exists()


def test_report_and_compare_name_what_is_not_there(tmp_path: Path) -> None:
    (tmp_path / "flaky.toml").write_text(FLAKY.replace("runs = 40", "runs = 2"))
    assert tether("run", "flaky.toml", "--id", "small", cwd=tmp_path).returncode == 0
    missing = tether("report", "nope", cwd=tmp_path)
    assert missing.returncode == 2 and "no experiment 'nope'" in missing.stderr
    unknown = tether("compare", "small", "a", "c", cwd=tmp_path)
    assert unknown.returncode == 2
    assert "no variant 'c' in experiment small; its variants: a, b" in unknown.stderr
    # The old form, a task named like a subcommand: --task.
    named = subprocess.run(
        [sys.executable, "-m", "tether", "experiment", "--task", "run", "--model",
         "scripted:demo", "--tools", "tether.demo:tools", "--runs", "1", "--json",
         "--store", "sqlite:///old.db"],
        cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert as_json(named)["task"] == "run"


@pytest.mark.parametrize(
    ("form", "words", "has", "lacks"),
    [
        ("run", "SPEC.toml", ["--id", "--max-cost", "--runs", "--chart"], ["--model", "--task"]),
        ("report", "ID", ["--chart", "--confidence"], ["--runs", "--id", "--model"]),
        ("compare", "ID A B", ["--metric", "--confidence"], ["--chart", "--runs", "--model"]),
    ],
)
def test_each_form_has_its_own_help(
    form: str, words: str, has: list[str], lacks: list[str], tmp_path: Path
) -> None:
    out = tether(form, "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    usage = " ".join(out.stdout.split("\n\n")[0].split())  # the usage, unwrapped
    assert usage.startswith(f"usage: tether experiment {form} ") and usage.endswith(words)
    assert all(flag in out.stdout for flag in has), out.stdout
    assert not any(flag in out.stdout for flag in lacks), out.stdout
    whole = tether("--help", cwd=tmp_path)  # without a form's word: the whole command's
    assert "TASK | run SPEC | report ID | compare ID A B" in whole.stdout
    assert "--model" in whole.stdout
