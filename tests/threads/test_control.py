"""Control across the thread tree: an approval inside a sub-agent pauses the session and is
decided from another process; a cancel reaches a grandchild; a handoff takes the turn."""

from __future__ import annotations

import asyncio
from pathlib import Path

from invariants import payloads, read_checked
from tether import Agent, fold, tool
from tether.events import ApprovalDecided, ThreadFinished, ThreadStarted, ToolFinished, TurnEnded
from tether.session import control
from tether.store import SQLiteStore, Store
from tether.testing import ScriptedModel, call


def _payer(sent: list[int]) -> Agent:
    @tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay an amount."""
        sent.append(amount)
        return f"paid {amount}"

    model = ScriptedModel(
        [call("pay", amount=30), lambda m: f"payer: {m[-1].tool_results[0].content}"]
    )
    return Agent(model, name="payer", tools=[pay])


def _boss(store: Store, sent: list[int]) -> Agent:
    model = ScriptedModel([call("payer", task="pay 30"), lambda m: m[-1].tool_results[0].content])
    return Agent(model, tools=[_payer(sent).as_tool()], store=store)


async def test_a_child_waiting_for_approval_pauses_the_session_and_another_process_decides(
    tmp_path: Path,
) -> None:
    sent: list[int] = []
    url = str(tmp_path / "tether.db")
    first = SQLiteStore(url)
    result = await _boss(first, sent).run("pay")
    await first.close()

    assert (result.stop_reason, result.state) == ("awaiting_approval", "waiting_approval")
    assert sent == []
    # Another process: its own store handle, nothing but the log to go on.
    other = SQLiteStore(url)
    view = await _boss(other, sent).view(result.session_id)
    assert view.pending_approvals == ("payer-1:call_0_0",)
    assert [(n.thread, n.status) for n in view.threads] == [("payer-1", "waiting_approval")]
    await control.decide(other, result.session_id, "payer-1:call_0_0", True)
    await other.close()

    third = SQLiteStore(url)
    boss = _boss(third, sent)
    done = await boss.resume(result.session_id)
    assert (done.stop_reason, done.output) == ("end_turn", "payer: paid 30")
    assert sent == [30]
    events = await read_checked(third, result.session_id)
    (decided,) = [e for e in events if isinstance(e.payload, ApprovalDecided)]
    assert decided.thread == "payer-1" and decided.payload.call_id == "call_0_0"
    (finished,) = payloads(events, ThreadFinished)
    assert finished.output == "payer: paid 30"
    assert fold(events)[1].threads[0].status == "finished"
    await boss.close()


async def test_a_denial_inside_a_child_is_a_result_the_child_reads(store: Store) -> None:
    sent: list[int] = []
    boss = _boss(store, sent)
    result = await boss.run("pay")
    await boss.decide(result.session_id, "payer-1:call_0_0", False, "not today")
    done = await boss.resume(result.session_id)
    assert sent == []
    assert done.output.startswith("payer: The user denied this call: not today")


async def test_a_cancel_reaches_a_grandchild(store: Store) -> None:
    began = asyncio.Event()

    @tool(effect="read")
    async def wait_forever() -> str:
        """Wait."""
        began.set()
        await asyncio.Event().wait()
        return "never"

    leaf = Agent(ScriptedModel([call("wait_forever")]), name="leaf", tools=[wait_forever])
    middle = Agent(
        ScriptedModel([call("leaf", task="wait")]), name="middle", tools=[leaf.as_tool()]
    )
    top = Agent(ScriptedModel([call("middle", task="go")]), tools=[middle.as_tool()], store=store)

    run = asyncio.create_task(top.run("go"))
    await asyncio.wait_for(began.wait(), 5)
    sid = next(iter(top.runs))
    await top.cancel(sid)
    result = await asyncio.wait_for(run, 5)

    assert result.state == "canceled"
    events = await read_checked(store, sid)
    ends = {e.thread: e.payload.stop_reason for e in events if isinstance(e.payload, TurnEnded)}
    assert ends == {"": "interrupted", "middle-1": "interrupted", "middle-1/leaf-1": "interrupted"}
    answers = {
        (e.thread, e.payload.call_id): e.payload.outcome
        for e in events
        if isinstance(e.payload, ToolFinished)
    }
    assert set(answers.values()) == {"canceled"} and len(answers) == 3
    assert [t.thread for t in payloads(events, ThreadStarted)] == ["middle-1", "middle-1/leaf-1"]
    # Each closer closes the threads below it: no thread is left open for good.
    finished = {
        e.thread: e.payload.stop_reason for e in events if isinstance(e.payload, ThreadFinished)
    }
    assert finished == {"middle-1": "interrupted", "middle-1/leaf-1": "interrupted"}
    assert {(n.thread, n.status) for n in fold(events)[1].threads} == {
        ("middle-1", "finished"),
        ("middle-1/leaf-1", "finished"),
    }


def _waiting_tree(began: asyncio.Event) -> Agent:
    """A parent that asks a child, which asks a grandchild that waits until cancelled."""

    @tool(effect="read")
    async def wait_forever() -> str:
        """Wait."""
        began.set()
        await asyncio.Event().wait()
        return "never"

    leaf = Agent(ScriptedModel([call("wait_forever")]), name="leaf", tools=[wait_forever])
    return Agent(ScriptedModel([call("leaf", task="wait")]), name="middle", tools=[leaf.as_tool()])


async def test_an_interrupted_parent_closes_its_open_child_threads(store: Store) -> None:
    began = asyncio.Event()
    top = Agent(
        ScriptedModel([call("middle", task="go"), "after the interrupt"]),
        tools=[_waiting_tree(began).as_tool()],
        store=store,
    )
    run = asyncio.create_task(top.run("go"))
    await asyncio.wait_for(began.wait(), 5)
    sid = next(iter(top.runs))
    await top.interrupt(sid)
    result = await asyncio.wait_for(run, 5)

    assert (result.state, result.stop_reason) == ("idle", "interrupted")
    events = await read_checked(store, sid)
    ends = [
        (e.thread, e.payload.stop_reason) for e in events if isinstance(e.payload, ThreadFinished)
    ]
    assert sorted(ends) == [("middle-1", "interrupted"), ("middle-1/leaf-1", "interrupted")]
    view = fold(events)[1]
    assert [(n.thread, n.status, n.stop_reason) for n in view.threads] == [
        ("middle-1", "finished", "interrupted"),
        ("middle-1/leaf-1", "finished", "interrupted"),
    ]
    # The session stays usable, and its next turn finds nothing of the old threads to go on.
    again = await top.run("again", session_id=sid)
    assert (again.stop_reason, again.output) == ("end_turn", "after the interrupt")
    assert len(payloads(await read_checked(store, sid), ThreadFinished)) == 2


async def test_a_session_cancelled_while_a_child_waits_for_approval_closes_the_child(
    store: Store,
) -> None:
    sent: list[int] = []
    boss = _boss(store, sent)
    result = await boss.run("pay")
    assert result.state == "waiting_approval"
    # Nobody runs the session: the cancel is closed by the control plane itself.
    await control.request_stop(store, result.session_id, "session")
    # Read plainly: the call waiting on the child's approval is left unanswered as a call
    # waiting on its own approval is when its session is cancelled.
    events = await store.read(result.session_id)
    (finished,) = [e for e in events if isinstance(e.payload, ThreadFinished)]
    assert (finished.thread, finished.payload.stop_reason) == ("payer-1", "interrupted")
    view = fold(events)[1]
    assert view.state == "canceled"
    assert [(n.thread, n.status) for n in view.threads] == [("payer-1", "finished")]
    assert sent == []


async def test_a_handoff_takes_the_rest_of_the_turn_with_the_conversation(store: Store) -> None:
    seen: list[list[str]] = []

    def billing_reply(messages: list) -> str:  # type: ignore[type-arg]
        seen.append([m.text for m in messages])
        return "billing: your refund is on its way"

    billing = Agent(ScriptedModel([billing_reply]), name="billing", system="You do billing.")
    triage = Agent(
        ScriptedModel([call("transfer_to_billing")]),
        handoffs=[billing],
        store=store,
    )
    result = await triage.run("I want a refund")

    assert (result.stop_reason, result.output) == ("end_turn", "billing: your refund is on its way")
    assert result.stop_detail == "handed off to billing"
    assert seen == [["I want a refund"]]  # the conversation so far, not the transfer call
    events = await read_checked(store, result.session_id)
    (started,) = payloads(events, ThreadStarted)
    assert (started.thread, started.handoff, started.system) == (
        "billing-1",
        True,
        "You do billing.",
    )
    main = [e.payload for e in events if e.thread == ""]
    assert [type(p).__name__ for p in main][-3:] == ["ToolStarted", "ToolFinished", "TurnEnded"]
    transcript, view = fold(events)
    assert view.last_output == "billing: your refund is on its way"
    assert transcript.messages[-1].tool_results[0].content == "billing: your refund is on its way"
