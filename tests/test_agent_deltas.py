"""The model's streamed output reaches an agent's observers: `on_delta` sees the pieces,
`on_session_delta` sees them with their session, for a host that runs many sessions on one
agent. Deltas are never stored."""

from __future__ import annotations

import asyncio

from tether import Agent, tool
from tether.providers.base import Delta
from tether.store import MemoryStore
from tether.testing import ScriptedModel, call


@tool(effect="read")
def shout(text: str) -> str:
    """Say it loudly."""
    return text.upper()


async def test_deltas_reach_both_observers_with_the_session_they_belong_to() -> None:
    plain: list[Delta] = []
    by_session: list[tuple[str, Delta]] = []
    store = MemoryStore()
    agent = Agent(
        ScriptedModel([call("shout", text="hi there"), "it said HI THERE"], delay=0.01),
        tools=[shout],
        store=store,
        on_delta=plain.append,
        on_session_delta=lambda sid, d: by_session.append((sid, d)),
    )
    first, second = await asyncio.gather(agent.run("go"), agent.run("go"))

    assert sorted(map(repr, plain)) == sorted(repr(d) for _, d in by_session)
    for result in (first, second):
        mine = [d for sid, d in by_session if sid == result.session_id]
        assert [d.kind for d in mine] == ["tool_input", "text", "text", "text", "text"]
        assert mine[0].text == '{"text": "hi there"}' and mine[0].call_id == "call_0_0"
        assert "".join(d.text for d in mine[1:]) == "it said HI THERE" == result.output
        # Offered to observers, never logged: the log is what it is without them.
        assert [e.type for e in await store.read(result.session_id)] == [
            "session.created",
            "user.message",
            "model.requested",
            "model.responded",
            "tool.started",
            "tool.finished",
            "model.requested",
            "model.responded",
            "turn.ended",
        ]


async def test_a_streamed_answer_records_its_time_to_first_token_and_an_unstreamed_one_none() -> (
    None
):
    store = MemoryStore()
    streamed = Agent(
        ScriptedModel(["one answer"], delay=0.02), store=store, on_delta=lambda d: None
    )
    quiet = Agent(ScriptedModel(["one answer"], delay=0.02), store=store)
    with_deltas, without = await streamed.run("go"), await quiet.run("go")

    timed = [e for e in await store.read(with_deltas.session_id) if e.type == "model.responded"]
    first_token = timed[0].payload.first_token_ms  # type: ignore[attr-defined]
    assert 0 < first_token <= timed[0].payload.latency_ms  # type: ignore[attr-defined]
    untimed = [e for e in await store.read(without.session_id) if e.type == "model.responded"]
    assert untimed[0].payload.first_token_ms == 0.0  # type: ignore[attr-defined]
    # A sparse field: an unstreamed answer's stored bytes carry no trace of it.
    assert "first_token_ms" not in untimed[0].to_json()["data"]
