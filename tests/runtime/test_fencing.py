"""Fencing tokens for effects: a tool sees the lease its call runs under (`ToolContext.fence`,
the generation), can check that its worker still holds it just before acting on the outside
world (`ensure_held`), and a sync tool on a thread is told through a flag (`lease_lost`)
once the lease is no longer its run's."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from invariants import kinds, payloads, read_checked
from tether import Agent, ToolContext, tool
from tether.errors import LeaseLost, UsageError
from tether.events import ToolFinished
from tether.messages import ToolCall
from tether.store import MemoryStore, SQLiteStore
from tether.testing import ScriptedModel, call
from tether.tools.run import execute


class Ledger:
    """An external system that takes writes with a fencing token (a bank, a ticket tracker)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, int | None]] = []
        self.refused: list[str] = []


async def test_a_zombie_woken_after_a_takeover_is_refused_before_its_external_write(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "t.db")
    ledger = Ledger()
    entered, proceed = asyncio.Event(), asyncio.Event()
    fences: list[int | None] = []

    @tool(effect="write")
    async def charge(ctx: ToolContext, amount: int) -> str:
        """Charge the customer."""
        fences.append(ctx.fence)
        entered.set()
        await proceed.wait()  # the worker stalls here (a GC pause, SIGSTOP, a slow network)
        try:
            await ctx.ensure_held()
        except LeaseLost as lost:
            ledger.refused.append(str(lost))
            assert ctx.lease_lost.is_set() and ctx.cancelled()
            raise
        ledger.writes.append((ctx.call_id, ctx.fence))
        return f"charged {amount}"

    # The first worker renews nothing (a watcher that never comes round): its lease runs out
    # while its tool waits, as a paused process's would.
    first_store, second_store = SQLiteStore(path), SQLiteStore(path)
    first = Agent(
        ScriptedModel([call("charge", amount=5), "charged"]),
        tools=[charge],
        store=first_store,
        lease_ttl=0.4,
        watch_interval=3600,
    )
    zombie = asyncio.create_task(first.run("charge 5"))
    await asyncio.wait_for(entered.wait(), 5)
    sid = (await first_store.sessions(10))[0].session_id
    await asyncio.sleep(0.5)
    assert await first_store.current_lease(sid) is None, "the lease ran out"

    # Another worker takes the session over: the started write is answered by the recovery
    # rules, never repeated, and the turn goes on under a higher generation.
    second = Agent(
        ScriptedModel([call("charge", amount=5), "taken over"]), tools=[charge], store=second_store
    )
    result = await second.resume(sid, lease_wait=2)
    assert result.output == "taken over"

    # The zombie wakes: its tool asks before writing, and is refused.
    proceed.set()
    with pytest.raises(LeaseLost):
        await asyncio.wait_for(zombie, 5)
    assert ledger.writes == [] and len(ledger.refused) == 1
    assert "no longer holds its lease" in ledger.refused[0]
    assert fences[0] is not None and fences[0] >= 1

    events = await read_checked(second_store, sid)
    finished = payloads(events, ToolFinished)
    assert [f.outcome for f in finished] == ["unknown_effect"]  # the zombie wrote nothing
    assert kinds(events).count("tool.started") == 1
    await first.close()
    await second.close()
    await first_store.close()
    await second_store.close()


async def test_each_claim_gives_a_tool_a_higher_fence(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "t.db"))
    fences: list[int | None] = []

    @tool(effect="read")
    async def look(ctx: ToolContext) -> str:
        """Look."""
        await ctx.ensure_held()  # held: passes
        fences.append(ctx.fence)
        return "seen"

    model = ScriptedModel([call("look"), "one", call("look"), "two"])
    agent = Agent(model, tools=[look], store=store)
    first = await agent.run("look")
    await agent.run("look again", session_id=first.session_id)
    assert len(fences) == 2 and fences[0] is not None and fences[1] is not None
    assert fences[1] > fences[0]
    await agent.close()
    await store.close()


async def test_a_call_without_a_lease_has_no_fence_and_its_check_passes() -> None:
    seen: list[tuple[int | None, bool]] = []

    @tool(effect="write")
    async def send(ctx: ToolContext) -> str:
        """Send."""
        await ctx.ensure_held()
        seen.append((ctx.fence, ctx.cancelled()))
        return "sent"

    outcome = await execute(send, ToolCall("c1", "send", {}), "ses_x")
    assert (outcome.outcome, seen) == ("ok", [(None, False)])


async def test_a_memory_agent_holds_a_lease_and_its_tools_see_its_fence() -> None:
    store = MemoryStore()
    fences: list[int | None] = []

    @tool(effect="write")
    async def send(ctx: ToolContext) -> str:
        """Send."""
        await ctx.ensure_held()
        fences.append(ctx.fence)
        return "sent"

    agent = Agent(ScriptedModel([call("send"), "done"]), tools=[send], store=store)
    assert (await agent.run("send")).output == "done"
    assert fences == [1]


async def test_a_sync_tool_checks_its_lease_from_its_thread_and_not_from_the_loop() -> None:
    store = MemoryStore()
    checked: list[str] = []

    @tool(effect="write")
    def send(ctx: ToolContext) -> str:
        """Send."""
        ctx.ensure_held_sync()
        checked.append("held")
        return "sent"

    agent = Agent(ScriptedModel([call("send"), "done"]), tools=[send], store=store)
    assert (await agent.run("send")).output == "done"
    assert checked == ["held"]

    @tool(effect="write")
    async def wrong(ctx: ToolContext) -> str:
        """Blocks its own loop."""
        with pytest.raises(UsageError):
            ctx.ensure_held_sync()
        return "refused"

    agent = Agent(ScriptedModel([call("wrong"), "done"]), tools=[wrong], store=store)
    events = await store.read((await agent.run("x")).session_id)
    finished = payloads(events, ToolFinished)
    assert [(f.outcome, f.content) for f in finished] == [("ok", "refused")]


async def test_a_sync_tool_still_running_at_a_hand_over_is_told_and_stops_before_its_effect(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(str(tmp_path / "t.db"))
    entered = threading.Event()
    effects: list[str] = []
    stopped: list[str] = []

    @tool(effect="write")
    def export(ctx: ToolContext) -> str:
        """A long export that writes at its end."""
        entered.set()
        if ctx.lease_lost.wait(10):  # polls (here: waits on) the flag between its chunks
            stopped.append(ctx.call_id)
            return "stopped"
        effects.append(ctx.call_id)
        return "exported"

    agent = Agent(ScriptedModel([call("export"), "done"]), tools=[export], store=store)
    running = asyncio.create_task(agent.run("export"))
    assert await asyncio.to_thread(entered.wait, 5)
    sid = (await store.sessions(10))[0].session_id
    assert await agent.hand_over(sid)
    with pytest.raises(Exception, match="handed over"):
        await asyncio.wait_for(running, 5)
    await asyncio.sleep(0.05)
    assert stopped and not effects
    events = await store.read(sid)
    assert "turn.ended" not in kinds(events)  # left for the next runner
    await agent.close()
    await store.close()
