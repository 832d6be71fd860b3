"""A provider's context-overflow error leads to compaction and one more attempt."""

from __future__ import annotations

from invariants import kinds, payloads, read_checked
from tether import Agent
from tether.context import ContextView, DefaultPolicy
from tether.events import ContextCompacted, ModelFailed
from tether.limits import Limits
from tether.messages import user
from tether.store.memory import MemoryStore

from .support import FIRST, SYSTEM, WindowedModel, fetch_tool


def _agent(model: WindowedModel, store: MemoryStore, context: object) -> Agent:
    return Agent(
        model,
        tools=[fetch_tool(6_000)],
        system=SYSTEM,
        limits=Limits(max_steps=100, max_output_tokens=1_000),
        store=store,
        context=context,  # type: ignore[arg-type]
    )


async def test_an_overflow_error_leads_to_compaction_and_success_on_the_next_attempt() -> None:
    # The catalog (here: the policy) believes in 64,000 tokens; the provider takes 9,000.
    model = WindowedModel(window=64_000, steps=12, first=user(FIRST), overflow_window=9_000)
    store = MemoryStore()
    result = await _agent(model, store, DefaultPolicy(window=64_000)).run(FIRST)

    assert result.stop_reason == "end_turn" and result.output == "done"
    assert model.overflows >= 1 and model.problems == []
    events = await read_checked(store, result.session_id)
    failed = payloads(events, ModelFailed)
    assert [f.error_class for f in failed] == ["context_overflow"] * model.overflows
    order = kinds(events)
    first = order.index("model.failed")
    # failure, then what the policy compacted, then the new attempt and its answer
    assert order[first + 1] == "context.compacted"
    after = order[first + 1 :]
    assert after[after.index("model.requested") + 1] == "model.responded"
    assert payloads(events, ContextCompacted)


async def test_without_a_policy_an_overflow_ends_the_turn_with_the_error() -> None:
    model = WindowedModel(window=64_000, steps=12, first=user(FIRST), overflow_window=9_000)
    store = MemoryStore()
    result = await _agent(model, store, False).run(FIRST)

    assert result.stop_reason == "error" and "context_overflow" in (result.stop_detail or "")
    events = await read_checked(store, result.session_id)
    assert not payloads(events, ContextCompacted)
    assert model.overflows == 1


async def test_a_second_overflow_after_compacting_ends_the_turn_rather_than_looping() -> None:
    # A provider that refuses everything: one compaction, one new attempt, then the error.
    model = WindowedModel(window=64_000, steps=12, first=user(FIRST), overflow_window=1)
    store = MemoryStore()
    seen: list[ContextView] = []

    def clear_everything(view: ContextView) -> list[ContextCompacted]:
        seen.append(view)
        if not view.overflowed:
            return []
        return [ContextCompacted(view.seqs[0], view.seqs[-1], None, ("nothing",))]

    result = await _agent(model, store, clear_everything).run(FIRST)
    assert result.stop_reason == "error"
    assert model.overflows == 2
    assert [v.overflowed for v in seen] == [False, True, False]
    events = await read_checked(store, result.session_id)
    assert [f.error_class for f in payloads(events, ModelFailed)] == ["context_overflow"] * 2


async def test_with_no_known_window_the_default_policy_still_answers_an_overflow() -> None:
    model = WindowedModel(window=64_000, steps=12, first=user(FIRST), overflow_window=9_000)
    store = MemoryStore()
    result = await _agent(model, store, True).run(FIRST)  # "windowed" is in no catalog
    assert result.output == "done" and model.overflows >= 1
    events = await read_checked(store, result.session_id)
    assert len(payloads(events, ModelFailed)) == model.overflows
    assert payloads(events, ContextCompacted)
