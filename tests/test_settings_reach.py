"""Where a run's `ModelSettings` reach besides its own requests: its sub-agents (each under
its own, which win), the context policy and its summary calls; and how a forcing
`tool_choice` lets go after the turn's first answer (or holds, with `reset_tool_choice=False`),
the same way in a run that resumes the session."""

from __future__ import annotations

import asyncio
import contextlib
import math

from tether import Agent, ModelSettings, Reasoning, tool
from tether.context import ContextView, DefaultPolicy
from tether.context.tokens import CharSizer
from tether.errors import HandedOver
from tether.events import Event, SessionCreated, ToolStarted, UserMessage
from tether.fold import Folder
from tether.messages import Message, Text, user
from tether.providers.base import ModelRequest, ModelResponse
from tether.settings import inherited
from tether.store import MemoryStore
from tether.testing.scripted import Reply, ScriptedModel, call


class Recording:
    """A scripted model that keeps every request it is sent."""

    def __init__(self, replies: list[Reply]) -> None:
        self.inner = ScriptedModel(replies)
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return "scripted"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return await self.inner.complete(request)


@tool
def lookup(query: str) -> str:
    """Look a thing up."""
    return f"found {query}"


async def test_a_runs_settings_reach_a_sub_agent_whose_own_win_but_not_its_tool_choice() -> None:
    child_model = Recording(["the child's answer"])
    child = Agent(child_model, name="helper", settings=ModelSettings(seed=9, temperature=0.7))
    parent_model = Recording([call("helper", task="help"), "done"])
    parent = Agent(
        parent_model,
        tools=[child.as_tool()],
        store=MemoryStore(),
        settings=ModelSettings(temperature=0.1, seed=3, tool_choice="helper"),
    )
    result = await parent.run("go", settings=ModelSettings(top_p=0.5, stop=["END"]))
    await parent.close()
    assert result.output == "done"
    (asked,) = child_model.requests
    # The parent's run settings under the child's own; the parent's tool_choice stays its own.
    assert asked.settings == ModelSettings(temperature=0.7, seed=9, top_p=0.5, stop=["END"])
    assert parent_model.requests[0].settings is not None
    assert parent_model.requests[0].settings.tool_choice == "helper"


async def test_a_sub_agent_without_settings_of_its_own_runs_with_its_callers() -> None:
    child_model = Recording(["ok"])
    child = Agent(child_model, name="helper")
    parent = Agent(
        Recording([call("helper", task="help"), "done"]),
        tools=[child.as_tool()],
        store=MemoryStore(),
        settings=ModelSettings(reasoning=Reasoning("high"), tool_choice="required"),
    )
    await parent.run("go")
    await parent.close()
    assert child_model.requests[0].settings == ModelSettings(reasoning=Reasoning("high"))
    assert inherited(None, None) is None


async def test_the_context_policy_sees_the_requests_settings() -> None:
    seen: list[ModelSettings | None] = []

    def policy(view: ContextView) -> list[object]:
        seen.append(view.settings)
        return []

    agent = Agent(
        Recording([call("lookup", query="x"), "done"]),
        tools=[lookup],
        store=MemoryStore(),
        context=policy,  # type: ignore[arg-type]
        settings=ModelSettings(temperature=0.3, tool_choice="lookup"),
    )
    await agent.run("go")
    await agent.close()
    # The turn's first request forces the call; the next lets go, and the policy sees each.
    assert seen == [
        ModelSettings(temperature=0.3, tool_choice="lookup"),
        ModelSettings(temperature=0.3),
    ]


def _long_folder(steps: int) -> Folder:
    log = [SessionCreated("m", system="sys"), UserMessage(user("the task"))]
    from tether.events import ModelResponded

    for k in range(steps):
        log.append(ModelResponded(Message("assistant", (Text(f"step {k} ".ljust(400, "z")),))))
        log.append(UserMessage(user("go on")))
    return Folder().apply_all([Event("s", i, f"e{i}", "t", p) for i, p in enumerate(log, 1)])


async def test_a_summary_call_is_made_with_the_runs_settings_less_the_tool_ones() -> None:
    folder = _long_folder(40)
    sizer = CharSizer(4.0)
    estimate = math.ceil(folder.transcript_chars / sizer.chars_per_token)
    run = ModelSettings(
        temperature=0.2,
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=50,
        reasoning=Reasoning(budget_tokens=2048),
    )
    view = ContextView(
        "s", "m", folder.system, folder.messages, folder.message_seqs, estimate,
        int(estimate / 0.95), sizer, settings=run,
    )  # fmt: skip
    summarizer = Recording(["a summary"])
    events = await DefaultPolicy(target=0.3, summarizer=summarizer)(view)
    assert any(e.summary == "a summary" for e in events)
    (asked,) = summarizer.requests
    assert asked.settings == ModelSettings(temperature=0.2, reasoning=Reasoning(budget_tokens=2048))
    assert asked.tools == ()
    # The policy's own allowance for the summary, with room for the thinking budget on top.
    assert asked.max_output_tokens is not None and asked.max_output_tokens > 2048


def _forced(sticky: bool) -> ModelSettings:
    return ModelSettings(tool_choice="lookup", reset_tool_choice=False if sticky else None)


async def _resumed_choices(sticky: bool) -> list[str | None]:
    """A run stopped while its forced call runs (handed over, as a crash leaves it), then
    resumed by another agent with the settings the session recorded: the tool_choice of
    each request the model was sent."""
    store = MemoryStore()
    started = asyncio.Event()
    forever = asyncio.Event()

    @tool(name="lookup")
    async def stuck(query: str) -> str:
        """Look a thing up."""
        started.set()
        await forever.wait()
        return "never"

    first_model = Recording([call("lookup", query="x"), "unused"])
    seen: list[Event] = []
    first = Agent(
        first_model, tools=[stuck], store=store, settings=_forced(sticky), on_event=seen.append
    )
    running = asyncio.create_task(first.run("go"))
    await asyncio.wait_for(started.wait(), 30)
    session_id = seen[0].session_id
    assert any(isinstance(e.payload, ToolStarted) for e in seen)
    assert await first.hand_over(session_id)
    with contextlib.suppress(HandedOver):
        await running
    await first.close()
    created = (await store.read(session_id, limit=1))[0].payload
    assert isinstance(created, SessionCreated)
    recorded = ModelSettings.from_json(created.metadata["model_settings"])  # type: ignore[arg-type]
    # A scripted model answers by the turn's step: the resumed request is its second.
    second_model = Recording([call("lookup", query="unused"), "done"])
    second = Agent(second_model, tools=[lookup], store=store, settings=recorded)
    result = await second.resume(session_id)
    await second.close()
    assert result.output == "done"
    requests = first_model.requests + second_model.requests
    return [None if r.settings is None else r.settings.tool_choice for r in requests]


async def test_a_forced_tool_choice_lets_go_after_the_first_answer_in_a_resumed_run_too() -> None:
    # The first run's forced request; the resumed run's request after the call it re-ran.
    assert await _resumed_choices(sticky=False) == ["lookup", None]


async def test_a_sticky_tool_choice_holds_in_a_resumed_run_too() -> None:
    assert await _resumed_choices(sticky=True) == ["lookup", "lookup"]
