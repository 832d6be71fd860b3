"""Must show (issue 19): an elicitation from a real MCP server waits durably across a worker
restart and continues with the answer. A runtime's worker runs a session whose tool elicits;
the runtime closes while the call waits (its turn is handed over, its server connection
ends); the answer is given through another runtime with no worker; a third runtime's worker
takes the session up, runs the `read` call again, and the server's repeated question is
answered from the log at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tether.events import InputAnswered, InputRequested
from tether.runtime import LocalRuntime, SessionSpec
from tether.runtime.base import StateConflict
from tether.store import SQLiteStore
from tether.testing.runtime_conformance import Observer

try:
    from .mcp_servers import asking_fixtures
    from .mcp_servers.harness import no_orphan_servers
except ImportError:
    from mcp_servers import asking_fixtures  # type: ignore[no-redef]
    from mcp_servers.harness import no_orphan_servers  # type: ignore[no-redef]

__all__ = ["no_orphan_servers"]

FIXTURES = asking_fixtures.__name__
SPEC = SessionSpec(
    model=f"python:{FIXTURES}:model", task="greet me", tools=(f"{FIXTURES}:tools",),
    end_after_turn=True,
)  # fmt: skip
FAST = {"poll_interval": 0.02, "watch_interval": 0.02}


async def test_an_elicitation_waits_across_a_worker_restart_and_goes_on_with_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "server.log"
    monkeypatch.setenv("ASKING_LOG", str(calls))
    allow = [FIXTURES.rpartition(".")[0] + ".*"]
    path = str(tmp_path / "t.db")

    store = SQLiteStore(path)
    async with LocalRuntime(store, workers=1, allow_code=allow, **FAST) as rt:  # type: ignore[arg-type]
        ref = await rt.start(SPEC)
        waiting = await Observer(rt, ref).until("an input", lambda s: s.state == "waiting_input")
        assert list(waiting.view.pending_inputs) == ["call_0_0"]
    await asyncio.wait_for(asking_fixtures.restart(), 15)  # the worker's process is gone
    events = await store.read(ref.session_id)
    assert events[-1].type == "input.requested" and "turn.ended" not in [e.type for e in events]
    assert await store.current_lease(ref.session_id) is None
    await store.close()

    # The answer, through a runtime that runs nothing: checked against the server's schema.
    again = SQLiteStore(path)
    async with LocalRuntime(again, workers=0) as rt:
        with pytest.raises(StateConflict, match="requested schema"):
            await rt.answer(ref, "call_0_0", {"name": ["not", "a", "string"]})
        await rt.answer(ref, "call_0_0", {"name": "Ada"})
        status = await rt.poll(ref)
        assert status.view.pending_inputs == {} and status.state == "waiting_tool"
    await again.close()

    last = SQLiteStore(path)
    async with LocalRuntime(last, workers=1, allow_code=allow, **FAST) as rt:  # type: ignore[arg-type]
        done = await Observer(rt, ref).until("the end", lambda s: s.terminal)
    await asyncio.wait_for(asking_fixtures.restart(), 15)
    events = await last.read(ref.session_id)
    await last.close()

    assert (done.state, done.last_output) == ("completed", "greeted: hello Ada"), done.to_json()
    asked = [e.payload for e in events if isinstance(e.payload, InputRequested)]
    answered = [e.payload for e in events if isinstance(e.payload, InputAnswered)]
    assert len(asked) == 1 and len(answered) == 1 and answered[0].key == asked[0].key
    assert [e.type for e in events].count("tool.started") == 2  # the read call ran again
    # The server asked in each run of the call (on 2026-07-28 its resolver runs once more
    # for the round that carries the answer), and got its answer once.
    lines = calls.read_text().splitlines()
    assert lines[-1] == "greet answered accept" and lines.count("greet answered accept") == 1
    assert lines.count("greet asked") >= 2
