"""A worker that stops hands its running turns over instead of closing them: the run writes
nothing more, lets its lease go and leaves its session marked, and whoever runs the session
next goes on with the same turn. `hand_over=False` keeps the old way (closed interrupted)."""

from __future__ import annotations

import signal
from pathlib import Path

from invariants import assert_log_invariants, kinds
from server.support import ACME, serve, start_worker, stop_worker
from tether.events import Event
from tether.runtime import LocalRuntime, Worker
from tether.runtime.http import HttpRuntime
from tether.store import SQLiteStore
from tether.testing.runtime_conformance import Observer, spec

TASK = "note 4 0.3"  # four tool steps; every model call takes 0.3 s


def steps_done(events: list[Event]) -> int:
    return kinds(events).count("tool.finished")


async def test_closing_a_runtime_hands_its_running_turn_to_the_next_one(tmp_path: Path) -> None:
    path = str(tmp_path / "t.db")
    store = SQLiteStore(path)
    async with LocalRuntime(store, workers=2, poll_interval=0.02, watch_interval=0.02) as rt:
        ref = await rt.start(spec(TASK, end_after_turn=True))
        await Observer(rt, ref).until("a step done", lambda s: s.view.steps >= 2)
    # Closed mid-turn: nothing closed it, and nobody holds it.
    events = await store.read(ref.session_id)
    handed = kinds(events)[-1]  # mostly a model call (0.3 s each); rarely a `note` call
    assert "turn.ended" not in kinds(events) and handed in ("model.requested", "tool.started")
    assert await store.current_lease(ref.session_id) is None
    assert [w.session_id for w in await store.runnable()] == [ref.session_id]
    await store.close()

    again = SQLiteStore(path)
    async with LocalRuntime(again, workers=2, poll_interval=0.02, watch_interval=0.02) as rt:
        done = await Observer(rt, ref).until("the end", lambda s: s.terminal)
    assert (done.state, done.last_output) == ("completed", "noted 4"), done.to_json()
    events = await again.read(ref.session_id)
    await again.close()
    assert_log_invariants(events)
    assert steps_done(events) == 4 and kinds(events).count("turn.ended") == 1
    # What the hand-over left open was done again, once: the model request asked again,
    # or the `note` call (a read) run again.
    pairs = list(zip(kinds(events), kinds(events)[1:], strict=False))
    if handed == "model.requested":
        assert pairs.count(("model.requested", "model.requested")) == 1
    else:
        assert kinds(events).count("tool.started") == 5


async def test_without_hand_over_a_stopping_worker_closes_its_turns_interrupted(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(str(tmp_path / "t.db"))
    async with LocalRuntime(store, workers=0) as rt:
        ref = await rt.start(spec(TASK, end_after_turn=True))
        worker = Worker(store, poll_interval=0.02, watch_interval=0.02)
        assert await worker.dispatch() == 1
        await Observer(rt, ref).until("a step done", lambda s: s.view.steps >= 1)
        await worker.stop(hand_over=False)
        status = await Observer(rt, ref).poll()
    assert (status.state, status.stop_reason) == ("idle", "interrupted"), status.to_json()
    await store.close()


async def test_a_worker_stopped_with_sigterm_hands_over_and_another_finishes(
    tmp_path: Path,
) -> None:
    with serve(tmp_path, "--workers", "0") as server:
        first = start_worker(server.store, "--drain", "0")
        second = None
        rt = HttpRuntime(server.url, ACME)
        try:
            ref = await rt.start(spec(TASK, end_after_turn=True))
            watch = Observer(rt, ref)
            await watch.until("a step done", lambda s: s.view.steps >= 2)
            stop_worker(first, signal.SIGTERM)
            assert first.returncode == 0
            stopped = await watch.poll()
            assert not stopped.terminal and stopped.stop_reason is None, stopped.to_json()
            second = start_worker(server.store)
            done = await watch.until("the end", lambda s: s.terminal)
            events = [e async for e in rt.events(ref)]
        finally:
            await rt.close()
            stop_worker(first)
            if second is not None:
                stop_worker(second)
    assert (done.state, done.last_output) == ("completed", "noted 4"), done.to_json()
    assert_log_invariants(events)
    assert kinds(events).count("turn.ended") == 1 and "cancel.requested" not in kinds(events)
