"""Experiments: a task run many times, each run its own session, reported with intervals."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tether import Agent, Limits, tool
from tether.errors import UsageError
from tether.events import SessionCreated
from tether.experiment import bootstrap_mean, run_experiment, wilson
from tether.messages import Message
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call
from tether.testing.scripted import Reply


@tool(effect="read")
def echo(text: str) -> str:
    """Say it back."""
    return text


def alternating(price: tuple[float, float] | None = None) -> ScriptedModel:
    """Every other run answers at once; the others call `echo` first (two steps)."""
    runs = itertools.count()

    def reply(messages: Sequence[Message]) -> Reply:
        if any(m.role == "assistant" for m in messages):
            return "done"
        return "done" if next(runs) % 2 == 0 else call("echo", text="x")

    return ScriptedModel([reply], repeat_last=True, price_per_million=price)


def test_the_wilson_interval_matches_its_textbook_values() -> None:
    eight = wilson(8, 10)
    assert (round(eight.low, 4), round(eight.high, 4)) == (0.4902, 0.9433)
    none, every = wilson(0, 10), wilson(10, 10)
    assert none.low == 0.0 and round(none.high, 4) == 0.2775
    assert round(every.low, 4) == 0.7225 and every.high == 1.0
    assert wilson(8, 10, 0.99).low < eight.low < eight.high < wilson(8, 10, 0.99).high
    with pytest.raises(UsageError, match="successes"):
        wilson(11, 10)


def test_the_bootstrap_interval_is_repeatable_and_holds_the_mean() -> None:
    values = [1.0, 2.0, 2.0, 3.0, 10.0, 4.0, 2.5, 3.5]
    first = bootstrap_mean(values, seed="x")
    assert first == bootstrap_mean(values, seed="x")
    mean = sum(values) / len(values)
    assert first.low < mean < first.high and first.low >= 1.0 and first.high <= 10.0
    assert bootstrap_mean([5.0] * 4) == bootstrap_mean([5.0]) and bootstrap_mean([5.0]).low == 5.0
    wider = bootstrap_mean(values, 0.99, seed="x")
    assert wider.low <= first.low and wider.high >= first.high


async def test_an_experiment_reports_how_its_runs_ended_and_tags_their_sessions() -> None:
    store = MemoryStore()
    agent = Agent(
        alternating(price=(3.0, 15.0)),
        tools=[echo],
        limits=Limits(max_steps=1),  # the runs that want a second step stop at the limit
        store=store,
        metadata={"team": "evals"},
    )
    report = await run_experiment(agent, "go", 6, concurrency=1)

    assert len(report.runs) == 6 and len({r.session_id for r in report.runs}) == 6
    outcomes = report.outcomes()
    assert {k: v[0] for k, v in outcomes.items()} == {"end_turn": 3, "turn_limit": 3}
    assert outcomes["end_turn"][1] == wilson(3, 6)
    steps = report.summary("steps")
    assert steps is not None and steps.mean == 1.0 and steps.interval.low == 1.0
    cost = report.summary("cost_usd")
    assert cost is not None and cost.mean > 0 and cost.interval.low <= cost.mean
    assert cost.interval.high >= cost.mean
    for run in report.runs:
        created = (await store.read(run.session_id))[0].payload
        assert isinstance(created, SessionCreated)
        assert created.metadata["experiment"] == {"id": report.experiment_id, "task": "go"}
        assert created.metadata["team"] == "evals"
    assert agent.metadata == {"team": "evals"}  # given back as it was
    as_json = report.to_json()
    assert as_json["outcomes"]["turn_limit"]["count"] == 3  # type: ignore[index]
    assert as_json["sessions"] == [r.session_id for r in report.runs]


async def test_an_unknown_cost_is_reported_unknown_not_zero() -> None:
    agent = Agent(alternating(), tools=[echo], store=MemoryStore())
    report = await run_experiment(agent, "go", 4, concurrency=2)
    assert report.summary("cost_usd") is None
    assert report.to_json()["metrics"]["cost_usd"] is None  # type: ignore[index]
    steps = report.summary("steps")
    assert steps is not None and steps.mean == 1.5 and (steps.low, steps.high) == (1.0, 2.0)


async def test_bad_settings_are_refused_before_any_run() -> None:
    store = MemoryStore()
    agent = Agent(alternating(), tools=[echo], store=store)
    for kwargs, message in (
        ({"runs": 0}, "at least 1 run"),
        ({"runs": 2, "concurrency": 0}, "concurrency"),
        ({"runs": 2, "confidence": 1.5}, "confidence"),
    ):
        with pytest.raises(UsageError, match=message):
            await run_experiment(agent, "go", **kwargs)  # type: ignore[arg-type]
    assert await store.sessions() == []


def tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_experiment_command_prints_a_report_and_refuses_bad_input(tmp_path: Path) -> None:
    task = "Where should we have a picnic on Saturday: Paris, Atlantis or Lisbon?"
    args = ["--model", "scripted:demo", "--tools", "tether.demo:tools", "--store", "sqlite:///e.db"]
    out = tether("experiment", task, *args, "--runs", "3", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["runs"] == 3 and report["outcomes"]["end_turn"]["count"] == 3
    assert report["metrics"]["steps"]["mean"] == 3.0 and report["metrics"]["cost_usd"] is None
    shown = tether(
        "sessions", "show", report["sessions"][0], "--store", "sqlite:///e.db", cwd=tmp_path
    )
    assert shown.returncode == 0 and "stop     end_turn" in shown.stdout

    human = tether("experiment", task, *args, "--runs", "2", cwd=tmp_path).stdout
    assert "2/2" in human and "cost_usd unknown" in human

    bad = tether(
        "experiment", task, *args[:-2], "--store", "sqlite:///f.db", "--runs", "0", cwd=tmp_path
    )
    assert (
        bad.returncode == 2
        and bad.stderr.strip()
        == "tether: error: argument --runs: must be a whole number 1 or more, not 0"
        " (see: tether experiment --help)"
    )
    assert not (tmp_path / "f.db").exists()  # nothing was touched
