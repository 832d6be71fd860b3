"""`run_matrix`: variants x tasks x repeats, each run a tagged session; `compare` tells a
real difference from noise; the same id run again runs only the missing cells; the spend
cap stops new runs; the report rebuilds from the store alone."""

from __future__ import annotations

import asyncio

import pytest

from experiment.fixtures import (
    agent_pair,
    always,
    expected_passes,
    fetcher,
    flaky,
    half_marks,
    raises,
    said_ok,
)
from tether import Agent, Limits
from tether.errors import UsageError
from tether.events import SessionCreated
from tether.experiment import Task, read_matrix, render_comparison, render_matrix, run_matrix
from tether.store import MemoryStore
from tether.store.base import Store
from tether.testing import ScriptedModel
from tether.testing.scripted import Hang, Reply

FETCH = Task("Fetch the answer.", check=said_ok, name="fetch")


async def test_a_variant_that_passes_90_percent_is_better_than_one_at_50() -> None:
    store = MemoryStore()
    variants = agent_pair(store, (0.9, 0.5), (1, 2))
    report = await run_matrix(variants, [FETCH], 40, concurrency=4, seed=7)

    a, b = report.variant("a"), report.variant("b")
    assert (a.runs, b.runs) == (40, 40) and report.missing() == []
    # Each run calls the tool once, so the passes are the generators' own counts.
    assert a.passed == expected_passes(0.9, 1, 40) and b.passed == expected_passes(0.5, 2, 40)
    ahead = report.compare("a", "b")
    assert ahead.verdict == "better" and ahead.pairs == 40 and ahead.unpaired == 0
    assert ahead.interval.low > 0 and ahead.interval.contains(ahead.difference)
    assert ahead.difference == pytest.approx((a.passed - b.passed) / 40)
    assert report.compare("b", "a").verdict == "worse"
    assert report.compare("a", "b") == ahead  # seeded: the same interval every time


async def test_the_same_agent_under_two_names_is_within_noise() -> None:
    store = MemoryStore()
    agent = Agent(fetcher(), tools=[flaky(0.7, 3)], store=store)
    report = await run_matrix({"a": agent, "a2": agent}, [FETCH], 40, seed=7)
    floor = report.compare("a", "a2")
    assert floor.verdict == "within_noise" and floor.interval.contains(0.0)
    # The noise floor of 40 pairs is wide: a difference smaller than this is not seen.
    assert floor.interval.high - floor.interval.low > 0.2


async def test_each_run_is_a_session_tagged_with_its_cell(store: Store) -> None:
    variants = agent_pair(store, (1.0, 0.0), (1, 2))
    tasks = [FETCH, Task("Fetch it again.", check=said_ok)]
    report = await run_matrix(variants, tasks, 2, experiment_id="tagged", seed=1)

    assert len(report.runs) == 8 and len({r.session_id for r in report.runs}) == 8
    cells = set()
    for run in report.runs:
        created = (await store.read(run.session_id))[0].payload
        assert isinstance(created, SessionCreated)
        tag = created.metadata["experiment"]
        assert isinstance(tag, dict)
        assert (tag["id"], tag["variant"], tag["task"], tag["repeat"]) == (
            "tagged", run.variant, run.task, run.repeat
        )  # fmt: skip
        cells.add((run.variant, run.task, run.repeat))
        assert run.passed == (run.variant == "a") and run.steps == 2 and run.seconds is not None
    assert {t for _, t, _ in cells} == {"fetch", "Fetch it again."}  # a task's name or prompt
    assert all(v.metadata == {} for v in variants.values())  # the agents are left as they were
    compared = render_comparison(report.compare("a", "b"))
    assert "a against b on pass_rate · 4 pair(s) by (task, repeat)" in compared
    assert "verdict  better (a against b)" in compared
    assert "few pairs: below about 10 a bootstrap interval is too narrow" in compared


async def test_the_report_rebuilds_from_the_store_alone(store: Store) -> None:
    live = await run_matrix(
        agent_pair(store, (0.9, 0.5), (1, 2)), [FETCH], 6, experiment_id="again", seed=3
    )
    rebuilt = await read_matrix(store, "again")
    assert rebuilt.runs == live.runs and rebuilt.plan == live.plan
    assert rebuilt.compare("a", "b") == live.compare("a", "b")
    assert rebuilt.to_json() == {**live.to_json(), "ran": 0}
    # A check given to the report re-scores the runs: a fixed check needs no new runs.
    lenient = await read_matrix(store, "again", checks={"fetch": always})
    assert all(r.passed for r in lenient.runs)
    with pytest.raises(UsageError, match="no experiment 'other'"):
        await read_matrix(store, "other")


async def test_a_run_that_did_not_finish_never_passes_and_a_broken_check_is_reported() -> None:
    store = MemoryStore()
    stopped = Agent(fetcher(), tools=[flaky(1.0, 1)], store=store, limits=Limits(max_steps=1))
    scored = Agent(fetcher(), tools=[flaky(1.0, 1)], store=store)
    report = await run_matrix(
        {"stopped": stopped, "scored": scored},
        [Task("a", check=always), Task("b", check=half_marks, pass_at=0.5), Task("c", check=raises)],
        1,
    )  # fmt: skip
    by = {(r.variant, r.task): r for r in report.runs}
    assert all(by["stopped", t].stop_reason == "turn_limit" for t in "abc")
    assert not any(by["stopped", t].passed for t in "abc")  # `always` is not even asked
    assert by["scored", "a"].passed and by["scored", "b"].passed
    assert by["scored", "b"].score == 0.5
    broken = by["scored", "c"]
    assert not broken.passed and broken.check_error == "ValueError: the check has a bug"
    assert report.variant("scored").check_errors == 1


async def test_an_interrupted_experiment_run_again_runs_only_its_missing_cells() -> None:
    store = MemoryStore()
    asked = 0
    hung = asyncio.Event()

    def third_hangs(messages: object) -> Reply:
        nonlocal asked
        asked += 1
        if asked == 3:
            hung.set()
            return Hang()
        return "done"

    first = Agent(ScriptedModel([third_hangs]), store=store)
    running = asyncio.create_task(
        run_matrix({"a": first}, [Task("go")], 4, concurrency=1, experiment_id="cut")
    )
    await hung.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    before = await read_matrix(store, "cut")
    assert len(before.runs) == 2 and [r.stop_reason for r in before.aside] == ["interrupted"]

    after = await run_matrix(
        {"a": Agent(ScriptedModel(["done"]), store=store)}, [Task("go")], 4, experiment_id="cut"
    )
    assert after.ran == 2 and len(after.runs) == 4 and after.missing() == []
    assert {r.session_id for r in before.runs} <= {r.session_id for r in after.runs}
    assert after.aside == before.aside  # kept, never counted
    shown = render_matrix(after)
    assert f"aside     1 abandoned or duplicate run(s): {after.aside[0].session_id}" in shown
    assert "ran       2 run(s) now, 4 counted in all" in shown and "incomplete" not in shown
    assert len(await store.sessions()) == 5


async def test_continuing_with_a_changed_agent_under_the_same_name_is_refused() -> None:
    store = MemoryStore()
    await run_matrix({"a": Agent(ScriptedModel(["done"]), store=store)}, [Task("go")], 1,
                     experiment_id="same")  # fmt: skip
    changed = Agent(ScriptedModel(["done"]), store=store, system="Be brief.")
    with pytest.raises(UsageError, match="variant 'a' of experiment same ran as another agent"):
        await run_matrix({"a": changed}, [Task("go")], 2, experiment_id="same")
    assert len(await store.sessions()) == 1


async def test_the_spend_cap_stops_new_runs_and_the_report_says_so() -> None:
    store = MemoryStore()
    agent = Agent(ScriptedModel(["done"], price_per_million=(3.0, 15.0)), store=store)
    one = (await run_matrix({"a": agent}, [Task("go")], 1)).runs[0].cost_usd
    assert one is not None and one > 0
    capped = await run_matrix(
        {"a": agent}, [Task("go")], 10, concurrency=1, max_cost_usd=2.5 * one, experiment_id="cap"
    )
    assert len(capped.runs) == 3 and len(capped.missing()) == 7
    note = capped.stop_note()
    assert note is not None and note.startswith("incomplete: 7 of 10 runs missing")
    assert "spend cap was reached" in note
    again = await run_matrix({"a": agent}, [Task("go")], 10, max_cost_usd=2.5 * one,
                             experiment_id="cap")  # fmt: skip
    assert again.ran == 0 and len(again.runs) == 3  # the cap is the experiment's, not a call's
    stored = (await read_matrix(store, "cap")).stop_note()
    assert stored is not None and "spend cap was reached" in stored


async def test_a_spend_cap_with_an_unknown_cost_stops_after_the_first_run() -> None:
    agent = Agent(ScriptedModel(["done"]), store=MemoryStore())  # no prices
    report = await run_matrix({"a": agent}, [Task("go")], 5, concurrency=1, max_cost_usd=1.0)
    assert len(report.runs) == 1
    assert report.halted is not None and "cost is unknown" in report.halted


async def test_bad_settings_are_refused_before_any_run() -> None:
    store = MemoryStore()
    agent = Agent(ScriptedModel(["done"]), store=store)
    for kwargs, message in (
        ({"variants": {}}, "at least one variant"),
        ({"variants": {"a b": agent}}, "variant name"),
        ({"tasks": []}, "at least one task"),
        ({"tasks": [Task("go"), Task("go")]}, "same name"),
        ({"runs": 0}, "at least 1 run"),
        ({"concurrency": 0}, "concurrency"),
        ({"max_cost_usd": 0.0}, "max_cost_usd"),
        ({"experiment_id": "no/slash"}, "experiment id"),
        ({"variants": {"a": agent, "b": Agent(ScriptedModel(["x"]), store=MemoryStore())}},
         "one store"),
    ):  # fmt: skip
        arguments = {"variants": {"a": agent}, "tasks": [Task("go")], "runs": 1, **kwargs}
        with pytest.raises(UsageError, match=message):
            await run_matrix(**arguments)  # type: ignore[arg-type]
    assert await store.sessions() == []
