"""An experiment over recorded sessions (`Task.from_session`): 20 sessions recorded by an
agent, each replayed from its second turn by two variants. The report pairs the runs by
source session and gives a verdict with its interval; the cassette served every call that
repeats a recorded one, new reads ran live, and no write ran live."""

from __future__ import annotations

import pytest

from replaying import Kit, found, model, record, session_number
from tether import Agent, Limits
from tether.errors import SessionNotFound, UsageError
from tether.events import SessionForked, ToolFinished
from tether.experiment import Cell, Task, read_matrix, render_comparison, run_matrix
from tether.experiment.records import StoredRun, record_of
from tether.experiment.spec import ExperimentSpec
from tether.session.fork import ForkPoint, fork
from tether.session.replay import replay
from tether.store import MemoryStore
from tether.store.base import Store
from tether.store.catalog import CatalogQuery

SESSIONS = 20


async def test_20_recorded_sessions_replayed_by_two_variants_pair_by_source(
    store: Store,
) -> None:
    kit = Kit()
    sources = [await record(store, kit, n, 2 + n % 2) for n in range(SESSIONS)]
    kit.clear()
    variants = {
        name: Agent(model(name), tools=kit.tools, store=store) for name in ("same", "curious")
    }
    tasks = [Task.from_session(s, at=ForkPoint(turn=2), check=found) for s in sources]
    report = await run_matrix(variants, tasks, 1, experiment_id="replayed", seed=3)

    # Every run is a replay child of its source, and the pairs are by source session.
    assert report.missing() == [] and len(report.runs) == 2 * SESSIONS
    by_source = {s: {r.variant for r in report.runs if r.source == s} for s in sources}
    assert by_source == {s: {"same", "curious"} for s in sources}
    for run in report.runs:
        own = await store.read(run.session_id)
        forked = [e.payload for e in own if isinstance(e.payload, SessionForked)]
        assert [(f.parent, f.kind) for f in forked] == [(run.source, "replay")]
        assert run.task == f"{run.source}@turn2"
    compared = report.compare("same", "curious")
    assert compared.paired_by == "source session" and compared.pairs == SESSIONS
    # `curious` fails on sessions 0, 3, ..., 18 (its new note is refused): 7 of 20.
    fails = sum(session_number(f"s{n}-t1") % 3 == 0 for n in range(SESSIONS))
    assert compared.difference == pytest.approx(fails / SESSIONS)
    assert compared.verdict == "better" and 0 < compared.interval.low < compared.difference
    assert compared.interval.contains(compared.difference) and compared.interval.high <= 1
    assert "pair(s) by (source session, repeat)" in render_comparison(compared)

    # The cassette: no call that repeats a recorded one ran, nor any write; the new reads ran.
    assert kit.noted == []
    replayed_turns = sum(1 + n % 2 for n in range(SESSIONS))  # turns 2.. of each
    assert sorted(kit.looked) == sorted(
        f"s{n}-t{t}?" for n in range(SESSIONS) if n % 3 for t in range(2, 3 + n % 2)
    )
    served = refused = 0
    for run in report.runs:
        link = await store.fork_link(run.session_id)
        assert link is not None
        for event in await store.read(run.session_id, link.at):
            if isinstance(event.payload, ToolFinished):
                served += bool(event.payload.replayed)
                refused += event.payload.outcome == "denied"
    noting = [n for n in range(SESSIONS) if n % 3 == 0]
    # `same` is served both calls of every turn; `curious` its first lookup of every turn.
    assert served == 2 * replayed_turns + replayed_turns
    # `curious` has its new note refused at every turn of the sessions where it notes.
    assert refused == sum(1 + n % 2 for n in noting)

    # The report rebuilds from the store alone, its pairs and verdict the same; run again,
    # the experiment finds every cell done (the same variants: none refused as changed).
    rebuilt = await read_matrix(store, "replayed")
    assert rebuilt.compare("same", "curious") == compared
    assert {r.source for r in rebuilt.runs} == set(sources)
    again = await run_matrix(variants, tasks, 1, experiment_id="replayed", seed=3)
    assert again.ran == 0 and again.compare("same", "curious") == compared


async def test_a_replay_task_whose_source_is_missing_fails_before_any_run() -> None:
    store = MemoryStore()
    kit = Kit()
    source = await record(store, kit, 1, 2)
    variants = {"same": Agent(model("same"), tools=kit.tools, store=store)}
    with pytest.raises(SessionNotFound):
        await run_matrix(
            variants, [Task.from_session("ses_00000000000000ff", at=ForkPoint(turn=2))], 1
        )
    with pytest.raises(UsageError, match="turn 7"):
        await run_matrix(variants, [Task.from_session(source, at=ForkPoint(turn=7))], 1)
    # A tenant's experiment replays only that tenant's sessions.
    theirs = {
        "same": Agent(model("same"), tools=kit.tools, store=store, metadata={"tenant": "acme"})
    }
    with pytest.raises(SessionNotFound):
        await run_matrix(theirs, [Task.from_session(source, at=ForkPoint(turn=2))], 1)
    assert [r.session_id for r in await store.catalog(CatalogQuery(limit=100))] == [source]


def test_a_spec_names_a_replay_task_by_its_source_and_point() -> None:
    spec = ExperimentSpec.model_validate(
        {
            "variants": {"a": {"model": "scripted:demo"}},
            "tasks": [
                {"from_session": "ses_0123456789abcdef", "at": {"turn": 2}, "live": "none"},
                {"prompt": "hello"},
            ],
        }
    )
    replayed, prompted = spec.built_tasks()
    assert replayed.key == "ses_0123456789abcdef@turn2" and prompted.key == "hello"
    assert replayed.source is not None and replayed.source.live == "none"
    assert replayed.source.at == ForkPoint(turn=2)
    for bad, says in (
        ({"prompt": "x", "from_session": "ses_1"}, "a prompt or a from_session"),
        ({"from_session": "ses_1"}, "needs its point"),
        ({"from_session": "ses_1", "at": {"step": 2}}, "a fork point is"),
        ({"from_session": "ses_1", "at": {"turn": 0}}, "whole number from 1"),
    ):
        with pytest.raises(ValueError, match=says):
            ExperimentSpec.model_validate({"variants": {"a": {"model": "m"}}, "tasks": [bad]})


async def test_a_replay_cut_between_its_turns_is_abandoned_and_one_stopped_early_counts() -> None:
    store = MemoryStore()
    kit = Kit()
    source = await record(store, kit, 1, 3)
    agent = Agent(model("same"), tools=kit.tools, store=store)
    cell = Cell("same", "t", 0)
    # Its process died after turn 2: turn 3 was never sent, its session never ended.
    cut = await fork(store, source, ForkPoint(turn=2), kind="replay")
    await agent.run(None, session_id=cut.session_id)
    run = await record_of(await _stored(store, cut.session_id), cell, None, 1.0)
    assert (run.stop_reason, run.abandoned, run.source) == ("", True, source)

    # A turn that stops at a limit ends the replay there: counted, and not passed.
    tight = Agent(model("same"), tools=kit.tools, store=store, limits=Limits(max_steps=1))
    done = await replay(tight, source, ForkPoint(turn=2))
    assert (done.turns, done.ran_turns) == (2, 1)
    run = await record_of(await _stored(store, done.session_id), cell, None, 1.0)
    assert (run.stop_reason, run.abandoned, run.passed) == ("turn_limit", False, False)
    # Its figures are its own: one step, none of the source's.
    assert run.steps == 1 and run.seconds is not None


async def _stored(store: Store, session_id: str) -> StoredRun:
    return StoredRun(session_id, {}, await store.read(session_id))
