"""Fencing tokens on PostgreSQL: a tool's `ensure_held()` reads the lease by the database's
clock, and refuses once another worker has claimed the session."""

from __future__ import annotations

import asyncio

import pytest

from tether import Agent, ToolContext, tool
from tether.errors import LeaseLost
from tether.store.postgres import PostgresStore
from tether.testing import ScriptedModel, call


async def test_a_tool_sees_its_fence_and_is_refused_after_a_takeover(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    entered, proceed = asyncio.Event(), asyncio.Event()
    seen: list[tuple[str, int | None]] = []
    refused: list[str] = []

    @tool(effect="write")
    async def charge(ctx: ToolContext) -> str:
        """Charge."""
        await ctx.ensure_held()  # held: passes
        seen.append((ctx.session_id, ctx.fence))
        entered.set()
        await proceed.wait()
        try:
            await ctx.ensure_held()
        except LeaseLost:
            refused.append(ctx.call_id)
            raise
        return "charged"

    agent = Agent(
        ScriptedModel([call("charge"), "done"]),
        tools=[charge],
        store=store,
        lease_ttl=0.5,
        watch_interval=3600,  # renews nothing: its lease runs out as a paused worker's would
    )
    run = asyncio.create_task(agent.run("charge"))
    await asyncio.wait_for(entered.wait(), 10)
    sid, fence = seen[0]
    await asyncio.sleep(0.7)
    other = await store.claim(sid, "another-worker", 30)
    assert fence is not None and other.generation > fence
    proceed.set()
    with pytest.raises(LeaseLost):
        await asyncio.wait_for(run, 10)
    assert refused == ["call_0_0"]
    await store.release(other)
    await agent.close()
    await store.close()
