"""`Agent.run(..., end_session=True)`: a one-shot task's final turn ends the session in the
same commit as `turn.ended`, so no observer sees it idle in between."""

from __future__ import annotations

from invariants import assert_log_invariants
from tether import Agent, Limits, tool
from tether.errors import RateLimited
from tether.events import SessionEnded, TurnEnded
from tether.store import MemoryStore
from tether.testing import Fail, ScriptedModel, call


@tool(effect="read")
def echo(text: str) -> str:
    """Say it back."""
    return text


async def _run(model: ScriptedModel, limits: Limits | None = None) -> tuple[object, list]:  # type: ignore[type-arg]
    store = MemoryStore()
    # retry=None: a provider error ends the turn at its first attempt.
    result = await Agent(model, tools=[echo], store=store, limits=limits, retry=None).run(
        "go", end_session=True
    )
    return result, await store.read(result.session_id)


async def test_an_ordinary_end_of_turn_completes_the_session_in_the_same_batch() -> None:
    result, events = await _run(ScriptedModel([call("echo", text="a"), "done"]))
    assert result.state == "completed" and result.stop_reason == "end_turn"  # type: ignore[attr-defined]
    assert isinstance(events[-2].payload, TurnEnded) and isinstance(
        events[-1].payload, SessionEnded
    )
    assert events[-1].payload.outcome == "completed"
    assert events[-1].time == events[-2].time  # appended together
    assert_log_invariants(events)


async def test_an_error_or_a_limit_fails_the_session() -> None:
    for model, limits in (
        (ScriptedModel([Fail(RateLimited("slow down", status=429))]), None),
        (ScriptedModel([call("echo", text="a")], repeat_last=True), Limits(max_steps=2)),
    ):
        result, events = await _run(model, limits)
        assert result.state == "failed"  # type: ignore[attr-defined]
        assert events[-1].payload.outcome == "failed"
        assert_log_invariants(events)


async def test_a_turn_waiting_for_approval_leaves_the_session_open() -> None:
    @tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    store = MemoryStore()
    result = await Agent(ScriptedModel([call("pay", amount=1)]), tools=[pay], store=store).run(
        "go", end_session=True
    )
    assert result.state == "waiting_approval"
    assert not any(isinstance(e.payload, SessionEnded) for e in await store.read(result.session_id))
