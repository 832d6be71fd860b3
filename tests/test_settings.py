"""`ModelSettings` per agent and per run: checks, how a run's go over an agent's, the tighter
output cap, `tool_choice` against the toolbox, the request hash, and what a resumed session
is run with."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from tether import Agent, Limits, ModelSettings, Reasoning, tool
from tether.errors import HandedOver, UsageError
from tether.events import Event, ModelRequested, SessionCreated
from tether.messages import user
from tether.providers.base import ModelRequest, ModelResponse
from tether.providers.registry import model_from_string
from tether.settings import apply_extra, merged, tighter
from tether.store import MemoryStore, Store
from tether.testing.scripted import Hang, Reply, ScriptedModel


@tool
def lookup(query: str) -> str:
    """Look a thing up."""
    return f"found {query}"


class Recording:
    """A scripted model that keeps every request it is sent."""

    def __init__(self, replies: Sequence[Reply]) -> None:
        self.inner = ScriptedModel(replies)
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return "scripted"  # as the model it stands in for: the name is in the request hash

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return await self.inner.complete(request)


async def _requested(store: Store, session_id: str) -> list[ModelRequested]:
    return [
        e.payload for e in await store.read(session_id) if isinstance(e.payload, ModelRequested)
    ]


# --- the values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"stop": ["ok", ""]}, "stop"),
        ({"seed": 1.5}, "seed"),
        ({"tool_choice": " "}, "tool_choice"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"timeout": 0}, "timeout"),
        ({"extra": {"x": {1, 2}}}, "extra"),
        ({"extra": {"x": float("nan")}}, "extra"),
    ],
)
def test_a_setting_out_of_its_range_is_a_usage_error_naming_it(
    fields: dict[str, object], named: str
) -> None:
    with pytest.raises(UsageError, match=named):
        ModelSettings(**fields)  # type: ignore[arg-type]


def test_reasoning_derives_a_budget_from_an_effort_and_an_effort_from_a_budget() -> None:
    assert [Reasoning(effort=e).effective_budget for e in ("low", "medium", "high")] == [
        1024,
        4096,
        16384,
    ]
    assert [Reasoning(budget_tokens=b).effective_effort for b in (1024, 4095, 4096, 20000)] == [
        "low",
        "low",
        "medium",
        "high",
    ]
    both = Reasoning(effort="low", budget_tokens=30000)
    assert (both.effective_effort, both.effective_budget) == ("low", 30000)
    with pytest.raises(UsageError, match="effort"):
        Reasoning()
    with pytest.raises(UsageError, match="effort"):
        Reasoning(effort="extreme")  # type: ignore[arg-type]


def test_stop_is_kept_as_a_list_and_a_lone_string_is_one_sequence() -> None:
    assert ModelSettings(stop=("END", "STOP")).stop == ["END", "STOP"]  # type: ignore[arg-type]
    assert ModelSettings(stop="END").stop == ["END"]  # type: ignore[arg-type]


def test_settings_round_trip_through_json() -> None:
    settings = ModelSettings(
        temperature=0.3,
        stop=["END"],
        tool_choice="lookup",
        reasoning=Reasoning(budget_tokens=2048),
        cache=False,
        extra={"metadata": {"user": "u1"}},
    )
    assert ModelSettings.from_json(settings.to_json()) == settings
    with pytest.raises(UsageError, match="temprature"):
        ModelSettings.from_json({"temprature": 1})


def test_a_run_setting_wins_field_by_field_and_extra_merges() -> None:
    agent = ModelSettings(temperature=0.1, seed=7, extra={"a": {"x": 1, "y": 2}, "keep": True})
    run = ModelSettings(temperature=0.9, stop=["END"], extra={"a": {"y": None, "z": 3}})
    both = merged(agent, run)
    assert both is not None
    assert (both.temperature, both.seed, both.stop) == (0.9, 7, ["END"])
    assert both.extra == {"a": {"x": 1, "y": None, "z": 3}, "keep": True}


def test_caching_stays_on_only_if_both_leave_it_on() -> None:
    off, on = ModelSettings(cache=False), ModelSettings(temperature=0.5)
    assert merged(off, on) is not None and merged(off, on).cache is False  # type: ignore[union-attr]
    assert merged(on, off) is not None and merged(on, off).cache is False  # type: ignore[union-attr]
    assert ModelSettings().cache is True


def test_default_settings_are_no_settings() -> None:
    assert merged(ModelSettings(), None) is None
    assert merged(None, ModelSettings()) is None
    assert merged(ModelSettings(), ModelSettings()) is None


def test_the_tighter_output_cap_wins() -> None:
    assert tighter(None, None) is None
    assert tighter(100, None) == 100
    assert tighter(None, 50) == 50
    assert tighter(100, 50) == 50


def test_extra_is_a_json_merge_patch() -> None:
    body = {"model": "m", "options": {"num_ctx": 4096, "seed": 1}, "stream_options": {"a": 1}}
    apply_extra(body, {"options": {"seed": None, "top_k": 5}, "stream_options": None, "n": [1]})  # type: ignore[arg-type]
    assert body == {"model": "m", "options": {"num_ctx": 4096, "top_k": 5}, "n": [1]}


# --- the agent ----------------------------------------------------------------------------


async def test_a_runs_settings_go_over_the_agents_for_that_run_only() -> None:
    model = Recording(["one", "two"])
    agent = Agent(
        model,
        store=MemoryStore(),
        settings=ModelSettings(temperature=0.1, max_output_tokens=500, stop=["END"]),
    )
    first = await agent.run("hi", settings=ModelSettings(temperature=0.7, seed=3))
    await agent.run("again", session_id=first.session_id)
    sent = [r.settings for r in model.requests]
    assert sent[0] == ModelSettings(temperature=0.7, max_output_tokens=500, stop=["END"], seed=3)
    assert sent[1] == ModelSettings(temperature=0.1, max_output_tokens=500, stop=["END"])
    assert model.inner.last_settings == sent[1]
    await agent.close()


async def test_the_tighter_of_the_limits_and_the_settings_output_cap_is_sent() -> None:
    model = Recording(["a", "b", "c"])
    limits = Limits(max_output_tokens=300)  # where a tenant's cap lands
    agent = Agent(model, store=MemoryStore(), limits=limits)
    done = await agent.run("x", settings=ModelSettings(max_output_tokens=100))
    await agent.run("y", session_id=done.session_id, settings=ModelSettings(max_output_tokens=900))
    await agent.run("z", session_id=done.session_id)
    assert [r.max_output_tokens for r in model.requests] == [100, 300, 300]
    await agent.close()


async def test_no_settings_send_none() -> None:
    model = Recording(["a"])
    agent = Agent(model, store=MemoryStore(), settings=ModelSettings())
    await agent.run("x")
    assert model.requests[0].settings is None and agent.engine.settings is None
    await agent.close()


def test_a_tool_choice_naming_no_tool_of_the_agents_is_refused_when_it_is_made() -> None:
    with pytest.raises(UsageError, match=r"'search'.*lookup"):
        Agent(ScriptedModel(["x"]), tools=[lookup], settings=ModelSettings(tool_choice="search"))
    with pytest.raises(UsageError, match="required"):
        Agent(ScriptedModel(["x"]), settings=ModelSettings(tool_choice="required"))
    Agent(ScriptedModel(["x"]), tools=[lookup], settings=ModelSettings(tool_choice="lookup"))


async def test_a_runs_tool_choice_naming_no_tool_is_refused_before_anything_is_written() -> None:
    store = MemoryStore()
    agent = Agent(ScriptedModel(["x"]), tools=[lookup], store=store)
    with pytest.raises(UsageError, match="'search'"):
        await agent.run("hi", settings=ModelSettings(tool_choice="search"))
    assert await store.sessions() == []
    await agent.close()


def test_a_setting_the_provider_cannot_honour_is_refused_when_the_agent_is_made() -> None:
    model = model_from_string("openai-responses:gpt-4.1", api_key="sk-x")
    with pytest.raises(UsageError, match="stop"):
        Agent(model, settings=ModelSettings(stop=["END"]))
    anthropic = model_from_string("anthropic:claude-sonnet-4-5", api_key="sk-x")
    with pytest.raises(UsageError, match="seed"):
        Agent(anthropic, settings=ModelSettings(seed=1))
    Agent(model, settings=ModelSettings(temperature=0.2))


async def test_a_new_session_records_the_settings_it_started_with() -> None:
    store = MemoryStore()
    agent = Agent(ScriptedModel(["a"]), store=store, settings=ModelSettings(temperature=0.2))
    done = await agent.run("x", settings=ModelSettings(seed=4))
    created = (await store.read(done.session_id))[0].payload
    assert isinstance(created, SessionCreated)
    recorded = ModelSettings.from_json(created.metadata["model_settings"])  # type: ignore[arg-type]
    assert recorded == ModelSettings(temperature=0.2, seed=4)
    plain = Agent(ScriptedModel(["a"]), store=store)
    again = await plain.run("x")
    assert "model_settings" not in (await store.read(again.session_id))[0].payload.metadata  # type: ignore[union-attr]
    await agent.close()


# --- the request hash and resuming -------------------------------------------------------


async def _hashes(settings: ModelSettings | None) -> list[str]:
    store = MemoryStore()
    agent = Agent(ScriptedModel(["a"]), store=store, settings=settings)
    done = await agent.run("same words")
    return [r.request_hash for r in await _requested(store, done.session_id)]


async def test_settings_are_part_of_the_request_hash() -> None:
    none = await _hashes(None)
    assert await _hashes(ModelSettings()) == none
    warm = await _hashes(ModelSettings(temperature=0.7))
    assert warm != none
    assert await _hashes(ModelSettings(temperature=0.7)) == warm
    assert await _hashes(ModelSettings(temperature=0.8)) != warm
    assert await _hashes(ModelSettings(extra={"user": "u1"})) != none


async def _handed_over(store: Store, run_settings: ModelSettings) -> tuple[str, str]:
    """A run stopped with its request open (as a crash leaves it): its session and the hash
    of that request."""
    asked = asyncio.Event()
    seen: list[Event] = []

    def observe(event: Event) -> None:
        seen.append(event)
        if isinstance(event.payload, ModelRequested):
            asked.set()

    agent = Agent(
        ScriptedModel([Hang()]),
        store=store,
        settings=ModelSettings(temperature=0.2),
        on_event=observe,
    )
    running = asyncio.create_task(agent.run("go", settings=run_settings))
    await asyncio.wait_for(asked.wait(), 30)
    session_id = seen[0].session_id
    assert await agent.hand_over(session_id)
    with pytest.raises(HandedOver):
        await running
    await agent.close()
    request = next(e.payload for e in seen if isinstance(e.payload, ModelRequested))
    assert isinstance(request, ModelRequested)
    return session_id, request.request_hash


async def test_a_resumed_request_is_the_same_request_when_given_the_same_settings() -> None:
    store = MemoryStore()
    override = ModelSettings(seed=9)
    session_id, first = await _handed_over(store, override)
    model = Recording(["done"])
    resumer = Agent(model, store=store, settings=ModelSettings(temperature=0.2))
    # The run's own settings are not in the log: the resuming run is given them again
    # (here from what `session.created` recorded, which is what the first run was sent).
    created = (await store.read(session_id))[0].payload
    assert isinstance(created, SessionCreated)
    recorded = ModelSettings.from_json(created.metadata["model_settings"])  # type: ignore[arg-type]
    result = await resumer.resume(session_id, settings=recorded)
    assert result.output == "done"
    hashes = [r.request_hash for r in await _requested(store, session_id)]
    assert hashes == [first, first]
    assert model.requests[0].settings == ModelSettings(temperature=0.2, seed=9)


async def test_a_resume_without_the_runs_settings_uses_the_resuming_agents_and_shows_it() -> None:
    store = MemoryStore()
    session_id, first = await _handed_over(store, ModelSettings(seed=9))
    model = Recording(["done"])
    resumer = Agent(model, store=store, settings=ModelSettings(temperature=0.2))
    await resumer.resume(session_id)
    hashes = [r.request_hash for r in await _requested(store, session_id)]
    assert hashes[0] == first and hashes[1] != first
    assert model.requests[0].settings == ModelSettings(temperature=0.2)


async def test_the_scripted_model_keeps_the_last_settings_it_was_sent() -> None:
    model = ScriptedModel(["a", "b"])
    settings = ModelSettings(top_p=0.5)
    await model.complete(ModelRequest("scripted", None, (user("hi"),), settings=settings))
    assert model.last_settings == settings
    await model.complete(ModelRequest("scripted", None, (user("hi"),)))
    assert model.last_settings is None


def test_equal_settings_hash_alike_and_a_whole_number_is_the_same_setting() -> None:
    one = ModelSettings(temperature=1, stop=["END"], extra={"user": "u1"})
    other = ModelSettings(temperature=1.0, stop=["END"], extra={"user": "u1"})
    assert one == other and one.digest == other.digest
    assert len({one, other}) == 1
    assert one.digest != ModelSettings(temperature=0.9, stop=["END"]).digest
