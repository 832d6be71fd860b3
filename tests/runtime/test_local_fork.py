"""`LocalRuntime.fork`: the runtime conformance suite's fork checks on memory and SQLite (on
PostgreSQL: `tests/postgres/test_runtime_conformance.py`), and what only an in-process runtime shows (the child's runner rebuilt from its own
`session.forked`; the tenant's quota of running sessions)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tether.errors import QuotaExceeded, SessionNotFound
from tether.events import ModelRequested, SessionForked
from tether.runtime import LocalRuntime
from tether.runtime.base import SessionRef, SpecChanges
from tether.runtime.quotas import Quota
from tether.runtime.sessions import Runner
from tether.session.fork import ForkPoint, config_of
from tether.store import Store
from tether.testing import FORK_CHECKS
from tether.testing.runtime_conformance import Observer, spec, turns

TWIN_B = "python:tether.testing.runtime_fixtures:twin_b"


@pytest.fixture
async def runtime(store: Store) -> AsyncIterator[LocalRuntime]:
    async with LocalRuntime(store, workers=4, poll_interval=0.05, watch_interval=0.05) as rt:
        yield rt


@pytest.mark.parametrize("check", FORK_CHECKS, ids=lambda c: c.__name__)
async def test_local_runtime_fork_conformance(runtime: LocalRuntime, check) -> None:  # type: ignore[no-untyped-def]
    await check(runtime)


def requests(events: list) -> list[ModelRequested]:  # type: ignore[type-arg]
    return [e.payload for e in events if isinstance(e.payload, ModelRequested)]


async def test_a_fork_without_changes_asks_what_its_parent_asked_and_changes_reach_the_child(
    runtime: LocalRuntime,
) -> None:
    rt = runtime.for_tenant("acme")
    parent, _ = await turns(rt, "echo one", "echo two", "echo three", "echo four")
    asked = requests(await rt.store.read(parent.session_id))
    same = await rt.fork(parent, at=ForkPoint(turn=2))
    await Observer(rt, SessionRef(same.session_id)).settled()
    mine = requests(await rt.store.read(same.session_id, same.at))
    # Turn 2's request again: the same bytes, so the same hash.
    assert [r.request_hash for r in mine] == [asked[1].request_hash]
    changed = await rt.fork(
        parent,
        at=ForkPoint(turn=2),
        changes=SpecChanges(model=TWIN_B, system="Answer in one word."),
    )
    status = await Observer(rt, SessionRef(changed.session_id)).settled()
    assert status.last_output == "twin b: echo two" and status.view.model == "scripted:twin"
    theirs = requests(await rt.store.read(changed.session_id, changed.at))
    assert theirs[0].model == "scripted:twin" and theirs[0].request_hash != asked[1].request_hash
    # The child's own configuration is what a worker rebuilds its runner from.
    config = await config_of(rt.store, changed.session_id)
    assert isinstance(config, SessionForked) and config.system == "Answer in one word."
    runner = Runner.from_created(config)
    assert runner is not None and runner.model == TWIN_B and runner.tenant == "acme"
    assert "idempotency" not in config.metadata


async def test_another_tenants_session_is_not_found_and_its_forks_are_not_listed(
    runtime: LocalRuntime,
) -> None:
    acme, globex = runtime.for_tenant("acme"), runtime.for_tenant("globex")
    parent, _ = await turns(acme, "echo one")
    with pytest.raises(SessionNotFound):
        await globex.fork(parent)
    child = await acme.fork(parent, message="echo mine")
    assert len(await globex.sessions(parent=parent.session_id)) == 0
    with pytest.raises(SessionNotFound):
        await globex.poll(SessionRef(child.session_id))
    with pytest.raises(SessionNotFound):
        await globex.fork(SessionRef(child.session_id))


async def test_a_fork_with_a_turn_to_run_counts_against_the_tenants_running_sessions(
    runtime: LocalRuntime,
) -> None:
    rt = runtime.for_tenant("acme", Quota(max_running=1))
    parent, _ = await turns(rt, "echo one")
    held = await rt.start(spec("hang"))
    await Observer(rt, held).until("running", lambda s: s.state == "waiting_model")
    with pytest.raises(QuotaExceeded, match="max_running"):
        await rt.fork(parent, message="echo more")
    assert len(await rt.sessions(parent=parent.session_id)) == 0
    idle = await rt.fork(parent)  # nothing to run: not counted
    assert idle.state == "idle"
    await rt.cancel(held)
