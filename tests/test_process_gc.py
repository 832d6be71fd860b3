"""A process running many sessions at once gets the collector thresholds the `tether` command
runs with, and its own back when the load is gone; an application's own thresholds, and
`TETHER_GC=off`, are left alone."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from tether import Agent, process, tool
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call

seen: list[tuple[int, int, int]] = []


class _Meeting:
    """Where the sessions of one run meet inside their call, twice: once all are inside, each
    notes the thresholds; once all have noted them, each may return. The second meeting is what
    makes the look fair: a session that returned could finish its run, and enough finished runs
    restore the thresholds before a slower session has looked (a loaded machine, or an idle one
    whose sessions finish within one step of the event loop)."""

    def __init__(self, sessions: int) -> None:
        self.sessions = sessions
        self.inside = 0
        self.looked = 0
        self.all_inside = asyncio.Event()
        self.all_looked = asyncio.Event()


meeting: list[_Meeting] = []  # the meeting of the run in progress


@tool(effect="read")
async def look() -> str:
    """Note the collector's thresholds while every session of the run is inside its call."""
    here = meeting[0]
    here.inside += 1
    if here.inside == here.sessions:
        here.all_inside.set()
    async with asyncio.timeout(30):  # a session that never arrives fails the test, not hangs it
        await here.all_inside.wait()
        seen.append(gc.get_threshold())
        here.looked += 1
        if here.looked == here.sessions:
            here.all_looked.set()
        await here.all_looked.wait()
    return "ok"


@pytest.fixture(autouse=True)
def _thresholds(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(*process.CPYTHON_THRESHOLDS)
    monkeypatch.setattr(process, "MANY_SESSIONS", 4)
    monkeypatch.delenv("TETHER_GC", raising=False)
    seen.clear()
    yield
    gc.set_threshold(*saved)


async def _run_many(n: int) -> None:
    meeting[:] = [_Meeting(n)]
    agent = Agent(ScriptedModel([call("look"), "done"]), tools=[look], store=MemoryStore())
    results = await asyncio.gather(*(agent.run("go") for _ in range(n)))
    assert all(r.stop_reason == "end_turn" for r in results)
    assert meeting[0].all_looked.is_set() and len(seen) == n, seen  # none gave up waiting


async def test_many_sessions_raise_the_thresholds_and_give_them_back() -> None:
    await _run_many(6)
    assert set(seen) == {process.GC_THRESHOLDS}
    assert gc.get_threshold() == process.CPYTHON_THRESHOLDS
    assert process._Load.running == 0 and not process._Load.raised


async def test_few_sessions_leave_the_defaults() -> None:
    await _run_many(3)
    assert set(seen) == {process.CPYTHON_THRESHOLDS}


async def test_an_applications_own_thresholds_are_left_alone() -> None:
    gc.set_threshold(5_000, 20, 20)
    await _run_many(6)
    assert set(seen) == {(5_000, 20, 20)} and gc.get_threshold() == (5_000, 20, 20)


async def test_tether_gc_off_leaves_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_GC", "off")
    await _run_many(6)
    assert set(seen) == {process.CPYTHON_THRESHOLDS}
