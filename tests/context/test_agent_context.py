"""`Agent(context=...)`: the default policy, a policy of one's own, or none."""

from __future__ import annotations

from invariants import kinds, payloads, read_checked
from tether import Agent
from tether.context import ContextView, DefaultPolicy, make_context
from tether.events import ContextCompacted, TurnEnded
from tether.limits import Limits
from tether.messages import user
from tether.store.memory import MemoryStore
from tether.testing import ScriptedModel

from .support import FIRST, SYSTEM, WindowedModel, fetch_tool


def _agent(model: WindowedModel, context: object, store: MemoryStore) -> Agent:
    return Agent(
        model,
        tools=[fetch_tool(6_000)],
        system=SYSTEM,
        limits=Limits(max_steps=100, max_output_tokens=1_000),
        store=store,
        context=context,  # type: ignore[arg-type]
    )


async def test_a_policy_of_ones_own_sees_every_request_and_its_events_are_folded() -> None:
    seen: list[int] = []

    def clear_all_but_the_last(view: ContextView) -> list[ContextCompacted]:
        seen.append(view.estimate)
        ids = tuple(r.call_id for m in view.messages[:-1] for r in m.tool_results)
        if not ids:
            return []
        return [ContextCompacted(view.seqs[0], view.seqs[-1], None, ids)]

    model = WindowedModel(window=16_000, steps=8, first=user(FIRST))
    store = MemoryStore()
    result = await _agent(model, clear_all_but_the_last, store).run(FIRST)
    assert result.output == "done" and model.problems == []
    assert len(seen) == 9  # once before each request
    events = await read_checked(store, result.session_id)
    assert len(payloads(events, ContextCompacted)) == 7
    # what the model got: every result but the latest one cleared
    last = model.bodies[-1]
    assert last.count("[result cleared to save context:") == 7


async def test_an_async_policy_works_as_well() -> None:
    calls = 0

    async def count(view: ContextView) -> list[ContextCompacted]:
        nonlocal calls
        calls += 1
        return []

    model = WindowedModel(window=16_000, steps=2, first=user(FIRST))
    result = await _agent(model, count, MemoryStore()).run(FIRST)
    assert result.output == "done" and calls == 3


async def test_with_the_policy_off_nothing_is_cleared_even_past_the_window() -> None:
    model = WindowedModel(window=16_000, steps=12, first=user(FIRST))
    store = MemoryStore()
    result = await _agent(model, False, store).run(FIRST)
    events = await read_checked(store, result.session_id)
    assert not payloads(events, ContextCompacted)
    assert any("input tokens" in p for p in model.problems)  # the window was passed


async def test_a_failing_policy_ends_the_turn_by_name() -> None:
    def broken(view: ContextView) -> list[ContextCompacted]:
        raise RuntimeError("no idea")

    model = WindowedModel(window=16_000, steps=3, first=user(FIRST))
    store = MemoryStore()
    result = await _agent(model, broken, store).run(FIRST)
    assert result.stop_reason == "error"
    assert result.stop_detail == "context policy failed: RuntimeError: no idea"
    events = await read_checked(store, result.session_id)
    assert kinds(events)[-1] == "turn.ended" and "model.requested" not in kinds(events)
    assert payloads(events, TurnEnded)[-1].stop_reason == "error"


async def test_a_failing_policy_ends_a_one_shot_session_in_the_same_batch() -> None:
    """The policy's failure closes the turn like any other stop: with `end_session`, the
    session ends in the batch that ends the turn, never idle in between."""

    def broken(view: ContextView) -> list[ContextCompacted]:
        raise RuntimeError("no idea")

    model = WindowedModel(window=16_000, steps=3, first=user(FIRST))
    store = MemoryStore()
    result = await _agent(model, broken, store).run(FIRST, end_session=True)
    assert (result.state, result.stop_reason) == ("failed", "error")
    events = await read_checked(store, result.session_id)
    turn, end = events[-2], events[-1]
    assert (turn.type, end.type) == ("turn.ended", "session.ended")
    assert turn.time == end.time  # one batch: one stamp


async def test_a_policy_breaking_a_request_is_refused_before_anything_is_appended() -> None:
    def swallow_the_task(view: ContextView) -> list[ContextCompacted]:
        return [ContextCompacted(view.seqs[0], view.seqs[0], "gone")]

    model = WindowedModel(window=16_000, steps=3, first=user(FIRST))
    store = MemoryStore()
    result = await _agent(model, swallow_the_task, store).run(FIRST)
    assert result.stop_reason == "error" and "first user message" in (result.stop_detail or "")
    events = await read_checked(store, result.session_id)
    assert not payloads(events, ContextCompacted)


def test_the_default_policy_summarises_with_the_agents_model_unless_told_otherwise() -> None:
    model, other = ScriptedModel(["a"]), ScriptedModel(["b"], name="other")
    default = make_context(True, model)
    assert default is not None and default.policy == DefaultPolicy(summarizer=model)
    mine = make_context(DefaultPolicy(threshold=0.9), model)
    assert mine is not None and mine.policy == DefaultPolicy(threshold=0.9, summarizer=model)
    chosen = make_context(DefaultPolicy(summarizer=other), model)
    assert chosen is not None and chosen.policy == DefaultPolicy(summarizer=other)
    assert make_context(False, model) is None
