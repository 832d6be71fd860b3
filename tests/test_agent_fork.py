"""`Agent.fork`: the library's face of `session.fork.fork`: an agent's session forked at a
turn, the child run by `resume` (forked mid-turn) or `run(..., session_id=)` (idle), each
with the parent's transcript up to the point and its own after."""

from __future__ import annotations

from tether.agent import Agent
from tether.fold import fold
from tether.session.fork import ForkChanges, ForkPoint
from tether.store.memory import MemoryStore
from tether.testing.runtime_fixtures import model


async def test_an_agents_session_forks_and_each_child_runs_on_its_own() -> None:
    agent = Agent(model(), store=MemoryStore(), system="You echo.")
    first = await agent.run("echo one")
    await agent.run("echo two", session_id=first.session_id)
    parent = await agent.view(first.session_id)
    mid = await agent.fork(first.session_id, ForkPoint(turn=2))
    assert mid.state == "pending" and mid.parent == first.session_id
    rerun = await agent.resume(mid.session_id)
    assert rerun.output == "echo: two" and rerun.steps == 1  # its own work only
    idle = await agent.fork(
        first.session_id, ForkPoint(after_turn=1), changes=ForkChanges(system="Be brief.")
    )
    assert idle.state == "idle"
    other = await agent.run("echo other", session_id=idle.session_id)
    assert other.output == "echo: other"
    child = await agent.view(idle.session_id)
    assert child.forked is not None and child.forked.parent == first.session_id
    assert (await agent.view(first.session_id)) == parent  # the parent is as it was
    transcript = fold(await agent.store.read(idle.session_id))[0]
    assert transcript.system == "Be brief."
    assert [m.text for m in transcript.messages] == ["echo one", "echo: one", "echo other",
                                                     "echo: other"]  # fmt: skip
    await agent.close()
