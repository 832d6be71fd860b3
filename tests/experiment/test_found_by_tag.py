"""An experiment's runs are found by their tag in the store's catalog: all of them, however
many other sessions the store holds and however much newer those are, and only the tenant's
own when a tenant asks."""

from __future__ import annotations

from experiment.fixtures import agent_pair, fill, said_ok
from tether.experiment import Task, read_matrix, run_matrix
from tether.experiment.records import find_runs, read_sessions
from tether.store.base import Store

FETCH = Task("Fetch the answer.", check=said_ok, name="fetch")


async def test_an_experiment_of_40_runs_is_found_whole_among_3000_newer_sessions(
    store: Store,
) -> None:
    await check_found_whole_by_tag(store)


async def check_found_whole_by_tag(store: Store) -> None:
    variants = agent_pair(store, (0.9, 0.5), (1, 2))
    for agent in variants.values():
        agent.metadata = {"tenant": "acme"}
    ran = await run_matrix(variants, [FETCH], 20, experiment_id="needle", seed=3)
    await fill(store, 3_000, "acme")
    tag = (await read_sessions(store, "needle"))[0].tag  # another tenant's, of the same name
    await fill(store, 5, "globex", tag)

    report = await read_matrix(store, "needle")
    assert len(report.runs) == 40 and report.missing() == []
    assert len(report.aside) == 5  # globex's, counted by nobody: their turns never ended
    assert {r.session_id for r in report.runs} == {r.session_id for r in ran.runs}
    assert report.variant("a").passed == ran.variant("a").passed

    mine = await read_sessions(store, "needle", tenant="acme")
    assert {s.session_id for s in mine} == {r.session_id for r in ran.runs}
    created = [s.events[0].time for s in mine]
    assert created == sorted(created)  # oldest first
    theirs = await find_runs(store, "needle", tenant="globex")
    assert len(theirs) == 5 and all(r.tenant == "globex" for r in theirs)
    assert len(await find_runs(store, "needle")) == 45  # every tenant's, for the operator

    again = await run_matrix(variants, [FETCH], 20, experiment_id="needle", seed=3)
    assert again.ran == 0  # every cell was found done: nothing is run twice
