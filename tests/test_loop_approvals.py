"""Calls that need approval: the turn pauses `awaiting_approval` while the other calls of the
turn still run; a decision appended to the log lets the next run allow or deny the call."""

from __future__ import annotations

import pytest

from invariants import kinds, payloads, read_checked
from tether import Agent, fold, tool
from tether.events import ApprovalDecided, ApprovalRequested, ToolFinished, ToolStarted, TurnEnded
from tether.session.log import SessionLog
from tether.store import Store
from tether.testing import ScriptedModel, call
from tether.tools import Tool


class Bank:
    def __init__(self) -> None:
        self.transfers: list[int] = []
        self.balance_reads = 0

    def tools(self) -> list[Tool]:
        @tool(needs_approval=True)
        def transfer(amount: int) -> str:
            """Move money out of the account."""
            self.transfers.append(amount)
            return f"sent {amount}"

        @tool(effect="read")
        def balance() -> str:
            """Read the balance."""
            self.balance_reads += 1
            return "balance: 100"

        return [transfer, balance]


def script() -> ScriptedModel:
    return ScriptedModel(
        [[call("transfer", amount=30), call("balance")], "Transfer handled; balance 100."]
    )


async def test_a_call_that_needs_approval_pauses_the_turn_while_the_others_run(
    store: Store,
) -> None:
    bank = Bank()
    agent = Agent(script(), tools=bank.tools(), store=store)

    result = await agent.run("Pay 30 and check the balance")

    assert (result.stop_reason, result.state) == ("awaiting_approval", "waiting_approval")
    assert bank.transfers == [] and bank.balance_reads == 1
    events = await read_checked(store, result.session_id)
    assert payloads(events, ApprovalRequested) == [
        ApprovalRequested("call_0_0", "transfer", {"amount": 30}, effect="write")
    ]
    # The request names what the call would do: its tool's effect class (a sparse field).
    asked = next(e for e in events if e.type == "approval.requested")
    assert asked.to_json()["data"]["effect"] == "write"
    assert [s.call_id for s in payloads(events, ToolStarted)] == ["call_0_1"]
    assert [(f.call_id, f.outcome) for f in payloads(events, ToolFinished)] == [("call_0_1", "ok")]
    assert payloads(events, TurnEnded)[-1].stop_reason == "awaiting_approval"
    _, view = fold(events)
    assert view.pending_approvals == ("call_0_0",)
    assert kinds(events).count("model.requested") == 1


async def test_running_again_without_a_decision_keeps_waiting(store: Store) -> None:
    bank = Bank()
    agent = Agent(script(), tools=bank.tools(), store=store)
    first = await agent.run("Pay 30 and check the balance")
    before = len(await store.read(first.session_id))

    again = await agent.run(None, session_id=first.session_id)

    assert again.state == "waiting_approval"
    assert bank.transfers == []
    events = await read_checked(store, first.session_id)
    assert len(events) == before, "no new work while nothing was decided"


async def decide(store: Store, session_id: str, allow: bool, reason: str | None = None) -> None:
    log = await SessionLog.load(store, session_id)
    await log.append(ApprovalDecided("call_0_0", allow, reason))


async def test_an_allowed_call_runs_on_the_next_run_and_the_model_answers(store: Store) -> None:
    bank = Bank()
    agent = Agent(script(), tools=bank.tools(), store=store)
    first = await agent.run("Pay 30 and check the balance")
    await decide(store, first.session_id, allow=True)

    result = await agent.run(None, session_id=first.session_id)

    assert (result.stop_reason, result.state) == ("end_turn", "idle")
    assert bank.transfers == [30] and bank.balance_reads == 1, "the read is not repeated"
    events = await read_checked(store, first.session_id)
    transcript, _ = fold(events)
    (results,) = [m for m in transcript.messages if m.role == "tool"]
    assert [(r.call_id, r.content, r.is_error) for r in results.tool_results] == [
        ("call_0_0", "sent 30", False),
        ("call_0_1", "balance: 100", False),
    ]
    assert [t.stop_reason for t in payloads(events, TurnEnded)] == ["awaiting_approval", "end_turn"]


async def test_a_denied_call_never_runs_and_the_model_sees_why(store: Store) -> None:
    bank = Bank()
    agent = Agent(script(), tools=bank.tools(), store=store)
    first = await agent.run("Pay 30 and check the balance")
    await decide(store, first.session_id, allow=False, reason="over the daily limit")

    result = await agent.run(None, session_id=first.session_id)

    assert result.stop_reason == "end_turn"
    assert bank.transfers == []
    events = await read_checked(store, first.session_id)
    denied = [f for f in payloads(events, ToolFinished) if f.call_id == "call_0_0"]
    assert [d.outcome for d in denied] == ["denied"]
    assert "over the daily limit" in denied[0].content
    assert "call_0_0" not in [s.call_id for s in payloads(events, ToolStarted)]
    transcript, _ = fold(events)
    (results,) = [m for m in transcript.messages if m.role == "tool"]
    assert results.tool_results[0].is_error


async def test_cancelling_a_session_that_waits_for_approval_ends_it(store: Store) -> None:
    bank = Bank()
    agent = Agent(script(), tools=bank.tools(), store=store)
    first = await agent.run("Pay 30 and check the balance")

    await agent.cancel(first.session_id)

    assert (await agent.view(first.session_id)).state == "canceled"
    events = await read_checked(store, first.session_id)
    assert kinds(events)[-2:] == ["cancel.requested", "session.ended"]
    assert bank.transfers == []


async def test_a_decision_for_an_ended_session_is_refused_and_writes_nothing(
    store: Store,
) -> None:
    from tether.errors import UsageError
    from tether.session import control

    bank = Bank()
    agent = Agent(
        ScriptedModel([call("transfer", amount=5), "done"]), tools=bank.tools(), store=store
    )
    result = await agent.run("pay")
    assert result.state == "waiting_approval"
    await agent.cancel(result.session_id)
    before = await store.read(result.session_id)
    with pytest.raises(UsageError, match="has ended"):
        await control.decide(store, result.session_id, "call_0_0", True)
    assert await store.read(result.session_id) == before
    assert bank.transfers == []
