"""Sub-agents in a `SessionSpec`: checked before anything is stored, recorded in
`session.created`, and rebuilt by any worker from that record alone; every sub-agent's model
and code pass the same checks as the session's own."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from invariants import assert_log_invariants, payloads
from runtime.subagent_models import PARENT
from tether.errors import UsageError
from tether.events import SessionCreated, ThreadFinished, ThreadStarted
from tether.limits import Limits
from tether.providers.endpoints import EndpointPolicy
from tether.runtime import CapabilityRefused, LocalRuntime, Worker
from tether.runtime.base import AgentSpec, SessionSpec
from tether.runtime.quotas import Quota
from tether.runtime.sessions import Runner
from tether.store import MemoryStore, SQLiteStore
from tether.testing.runtime_conformance import Observer
from tether.testing.runtime_fixtures import MODEL, TOOLS

# researcher asks helper; helper runs the fixtures' model and tools (`guarded` needs approval).
TREE = {
    "researcher": AgentSpec(PARENT, system="You research.", agents=("helper",)),
    "helper": AgentSpec(MODEL, tools=TOOLS, description="Does small jobs."),
}


def tree_spec(task: str, **changes: object) -> SessionSpec:
    return SessionSpec(model=PARENT, task=task, agents=TREE, **changes)  # type: ignore[arg-type]


def test_a_spec_with_sub_agents_survives_its_json_and_one_without_keeps_its_old_form() -> None:
    spec = tree_spec("x", max_depth=4, max_threads=2)
    spec.check()
    data = spec.to_json()
    assert data["agents"]["helper"]["tools"] == list(TOOLS)  # type: ignore[index,call-overload]
    assert SessionSpec.from_json(data) == spec
    plain = SessionSpec(model=MODEL, task="x").to_json()
    assert not {"agents", "max_depth", "max_threads"} & set(plain)
    assert SessionSpec.from_json(plain).agents == {}


@pytest.mark.parametrize(
    ("agents", "changes", "message"),
    [
        ({"a b": AgentSpec(MODEL)}, {}, "letters, digits"),
        ({"a": AgentSpec(" ")}, {}, "spec.agents.a.model is empty"),
        ({"a": AgentSpec(MODEL, tools=(":x",))}, {}, "spec.agents.a.tools"),
        ({"a": AgentSpec(MODEL, agents=("ghost",))}, {}, "names 'ghost'"),
        ({"a": AgentSpec(MODEL, agents=("a",))}, {}, "cycle: a -> a"),
        (
            {"a": AgentSpec(MODEL, agents=("b",)), "b": AgentSpec(MODEL, agents=("a",))},
            {},
            "cycle: a -> b -> a",
        ),
        (TREE, {"max_depth": 1}, "nest 2 deep, more than max_depth=1"),
        (TREE, {"max_threads": 0}, "max_threads 1 or more"),
    ],
)
def test_a_bad_sub_agent_tree_is_refused_by_check(
    agents: dict[str, AgentSpec], changes: dict[str, object], message: str
) -> None:
    spec = SessionSpec(model=MODEL, task="x", agents=agents, **changes)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"spec\.") as refused:
        spec.check()
    assert message in str(refused.value)


async def test_a_child_awaiting_approval_is_decided_and_finished_by_another_runtime(
    tmp_path: Path,
) -> None:
    """The tree is rebuilt from `session.created` alone: the second runtime (a fresh worker,
    a fresh store object) never saw the spec."""
    path = str(tmp_path / "tree.db")
    first = SQLiteStore(path)
    async with LocalRuntime(first, workers=1, poll_interval=0.02) as rt:
        ref = await rt.start(
            tree_spec("ask researcher ask helper guarded launch", end_after_turn=True)
        )
        waiting = await Observer(rt, ref).until("approval", lambda s: s.settled)
    await first.close()
    assert waiting.state == "waiting_approval", waiting.to_json()
    [call_id] = waiting.view.pending_approvals
    assert call_id.startswith("researcher-1/helper-1:")

    second = SQLiteStore(path)
    async with LocalRuntime(second, workers=1, poll_interval=0.02) as rt:
        await rt.decide(ref, call_id, allow=True)
        done = await Observer(rt, ref).until("the end", lambda s: s.terminal)
        events = await second.read(ref.session_id)
    await second.close()

    assert done.state == "completed", done.to_json()
    assert done.last_output == "researcher said: helper said: guarded said: done: launch"
    assert_log_invariants(events)
    started = payloads(events, ThreadStarted)
    assert [(s.thread, s.agent, s.system) for s in started] == [
        ("researcher-1", "researcher", "You research."),
        ("researcher-1/helper-1", "helper", None),
    ]
    finished = {f.thread: f.output for f in payloads(events, ThreadFinished)}
    assert finished == {
        "researcher-1/helper-1": "guarded said: done: launch",
        "researcher-1": "helper said: guarded said: done: launch",
    }
    created = events[0].payload
    assert isinstance(created, SessionCreated)
    assert set(created.tools) == {"researcher"}  # the main agent is offered the root only
    runner = Runner.from_created(created)
    assert runner is not None and set(runner.sub_agents()) == {"researcher", "helper"}


async def test_a_handoff_sub_agent_answers_the_turn() -> None:
    agents = {"closer": AgentSpec(MODEL, tools=TOOLS, handoff=True)}
    async with LocalRuntime(MemoryStore(), workers=1, poll_interval=0.02) as rt:
        spec = SessionSpec(model=PARENT, task="hand closer", agents=agents, end_after_turn=True)
        ref = await rt.start(spec)
        done = await Observer(rt, ref).until("the end", lambda s: s.terminal)
        events = await rt.store.read(ref.session_id)
    created = events[0].payload
    assert isinstance(created, SessionCreated) and set(created.tools) == {"transfer_to_closer"}
    assert done.state == "completed"
    # The closer took the conversation over: its answer echoes the task it was handed.
    assert done.last_output == "echo: hand closer"
    assert [s.handoff for s in payloads(events, ThreadStarted)] == [True]


async def test_a_sub_agent_model_the_endpoint_policy_refuses_creates_nothing() -> None:
    store = MemoryStore()
    agents = {"spy": AgentSpec("openai-compatible:m@http://127.0.0.1:9/v1")}
    async with LocalRuntime(store, workers=0, endpoints=EndpointPolicy()) as rt:
        with pytest.raises(CapabilityRefused, match=r"sub-agent spy: model .*not an endpoint"):
            await rt.start(SessionSpec(model=MODEL, task="x", agents=agents))
        # Hidden deeper in the tree, it is refused all the same.
        deep = {"a": AgentSpec(MODEL, agents=("spy",)), **agents}
        with pytest.raises(CapabilityRefused, match="sub-agent spy"):
            await rt.start(SessionSpec(model=MODEL, task="x", agents=deep))
    assert await store.sessions() == []


async def test_sub_agents_load_only_allowed_code_and_keep_the_tenants_output_cap() -> None:
    store = MemoryStore()
    async with LocalRuntime(store, workers=0, allow_code=["tether.testing.*"]) as rt:
        for sub in (AgentSpec("python:os:getcwd"), AgentSpec(MODEL, tools=("os:system",))):
            with pytest.raises(UsageError, match="not code this runtime may load"):
                await rt.start(SessionSpec(model=MODEL, task="x", agents={"a": sub}))
        tenant = rt.for_tenant("acme", Quota(max_output_tokens=100))
        greedy = AgentSpec(MODEL, limits=Limits(max_output_tokens=1_000))
        with pytest.raises(CapabilityRefused, match=r"agents\.a\.limits\.max_output_tokens"):
            await tenant.start(SessionSpec(model=MODEL, task="x", agents={"a": greedy}))
        ref = await tenant.start(SessionSpec(model=MODEL, task="x", agents={"a": AgentSpec(MODEL)}))
        created = (await store.read(ref.session_id))[0].payload
    assert isinstance(created, SessionCreated)
    runner = Runner.from_created(created)
    assert runner is not None
    assert runner.sub_agents()["a"].limits.max_output_tokens == 100


async def test_a_sub_agent_named_as_a_tool_is_refused_at_start() -> None:
    store = MemoryStore()
    async with LocalRuntime(store, workers=0) as rt:
        spec = SessionSpec(model=MODEL, task="x", tools=TOOLS, agents={"note": AgentSpec(MODEL)})
        with pytest.raises(UsageError, match="two tools are named 'note'"):
            await rt.start(spec)
    assert await store.sessions() == []


async def test_a_worker_refuses_a_stored_session_whose_sub_agent_model_it_may_not_call() -> None:
    """Written by a laxer process; the worker checks each sub-agent's model as the main one."""
    store = MemoryStore()
    agents = {"spy": AgentSpec("openai-compatible:m@http://127.0.0.1:9/v1")}
    async with LocalRuntime(store, workers=0) as lax:
        ref = await lax.start(SessionSpec(model=MODEL, task="x", agents=agents))
    worker = Worker(store, poll_interval=0.02, endpoints=EndpointPolicy())
    running = asyncio.create_task(worker.run())
    try:
        async with LocalRuntime(store, workers=0) as rt:
            status = await Observer(rt, ref).until("the end", lambda s: s.terminal)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await worker.stop()
    assert status.state == "failed"
    assert "sub-agent spy" in (status.view.stop_detail or "")
    assert "not an endpoint this server allows" in (status.view.stop_detail or "")


async def test_a_recorded_tree_with_a_cycle_is_not_rebuilt() -> None:
    store = MemoryStore()
    async with LocalRuntime(store, workers=0) as rt:
        ref = await rt.start(SessionSpec(model=MODEL, task="x", agents={"a": AgentSpec(MODEL)}))
        created = (await store.read(ref.session_id))[0].payload
        assert isinstance(created, SessionCreated)
        runner = Runner.from_created(created)
        assert runner is not None
        looped = dataclasses.replace(runner, agents={"a": {"model": MODEL, "agents": ["a"]}})
        with pytest.raises(UsageError, match="cycle: a -> a"):
            looped.sub_agents()
