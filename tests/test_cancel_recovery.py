"""A cancel that closes a turn whose calls a gone runner started answers them by the recovery
rules, not `canceled`: a started `write` may have happened, so it is `unknown_effect`; a
started `read` was merely cut off; a call never started was canceled before it ran."""

from __future__ import annotations

from invariants import payloads, read_checked
from tether import Agent, tool
from tether.events import (
    CancelRequested,
    ModelRequested,
    ModelResponded,
    Payload,
    SessionCreated,
    ToolFinished,
    ToolStarted,
    UserMessage,
)
from tether.messages import ToolCall, assistant, user
from tether.recovery import CANCELED_BEFORE, CANCELED_RUNNING, UNKNOWN_EFFECT
from tether.session import control
from tether.store import MemoryStore
from tether.testing import ScriptedModel
from tether.testing.store_conformance import make_events


@tool(effect="write")
def charge(cents: int) -> str:
    """Charge."""
    return f"charged {cents}"


@tool(effect="read")
def peek(key: str) -> str:
    """Read a key."""
    return key


CALLS = (
    ToolCall("c1", "charge", {"cents": 5}),
    ToolCall("c2", "peek", {"key": "k"}),
    ToolCall("c3", "charge", {"cents": 7}),
)


async def left_by_a_dead_runner(store: MemoryStore, *more: Payload) -> str:
    """A session whose runner died after starting c1 (a write) and c2 (a read), not c3."""
    sid = "ses_dead"
    batch: list[Payload] = [
        SessionCreated("scripted"),
        UserMessage(user("pay")),
        ModelRequested("scripted", "h", 1),
        ModelResponded(assistant("", CALLS)),
        ToolStarted("c1", "charge", "write"),
        ToolStarted("c2", "peek", "read"),
        *more,
    ]
    await store.append(sid, make_events(sid, 1, batch), expected_seq=0)
    return sid


def answers(events: list[object]) -> dict[str, tuple[str, str]]:
    return {p.call_id: (p.outcome, p.content) for p in payloads(events, ToolFinished)}  # type: ignore[arg-type]


async def test_a_session_cancel_honoured_on_resume_answers_a_started_write_unknown_effect() -> None:
    store = MemoryStore()
    sid = await left_by_a_dead_runner(store, CancelRequested("session", "stop it"))
    agent = Agent(ScriptedModel(["never asked"]), tools=[charge, peek], store=store)
    result = await agent.resume(sid)

    assert result.state == "canceled"
    events = await read_checked(store, sid)
    assert answers(events) == {
        "c1": ("unknown_effect", UNKNOWN_EFFECT),
        "c2": ("canceled", CANCELED_RUNNING),
        "c3": ("canceled", CANCELED_BEFORE),
    }


async def test_a_cancel_closed_by_control_with_nobody_running_answers_started_calls_unknown() -> (
    None
):
    # No runner, no tools at hand: every started call is taken for a write.
    store = MemoryStore()
    sid = await left_by_a_dead_runner(store)
    await control.request_stop(store, sid, "session")

    events = await read_checked(store, sid)
    assert answers(events) == {
        "c1": ("unknown_effect", UNKNOWN_EFFECT),
        "c2": ("unknown_effect", UNKNOWN_EFFECT),
        "c3": ("canceled", CANCELED_BEFORE),
    }
