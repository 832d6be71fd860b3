"""`recovery.decide_calls` is the one place that decides whether a call can run: a call to
run comes with its tool and bound arguments, and every call that cannot run (an unknown
tool, arguments that do not bind, a write a gone runner started, a denial) is an answer the
loop commits with the model's answer, never started. Approval decisions are typed: the fold
keeps each `approval.decided` payload, and a view's JSON form is what it always was."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from invariants import read_checked
from tether import Agent, tool
from tether.events import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    ModelRequested,
    ModelResponded,
    SessionCreated,
    ToolFinished,
    UserMessage,
)
from tether.fold import Folder
from tether.messages import ToolCall, assistant, user
from tether.recovery import UNKNOWN_EFFECT, decide_calls, decide_open_calls
from tether.runtime.base import view_from_json
from tether.store import MemoryStore
from tether.store.base import Lease
from tether.testing import ScriptedModel, call
from tether.testing.store_conformance import make_events
from tether.tools import Toolbox


@tool
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


@tool(effect="read")
def peek(key: str) -> str:
    """Read a key."""
    return key


@tool(needs_approval=True)
def transfer(amount: int) -> str:
    """Move money."""
    return f"sent {amount}"


TOOLS = Toolbox([add, peek, transfer])


def decide(
    *calls: ToolCall,
    started: Sequence[str] = (),
    decisions: dict[str, ApprovalDecided] | None = None,
    pending: Sequence[str] = (),
) -> list[tuple[str, str | None, object]]:
    """(action, answer outcome, kwargs) per call."""
    out = decide_calls(calls, set(started), decisions or {}, pending, TOOLS)
    assert [d.call for d in out] == list(calls)
    return [(d.action, d.answer.outcome if d.answer else None, d.kwargs) for d in out]


# -- one decision per call -----------------------------------------------------------------


def test_a_call_to_run_comes_with_its_tool_and_its_validated_arguments() -> None:
    (d,) = decide_calls([ToolCall("c1", "add", {"a": 2})], set(), {}, (), TOOLS)
    assert (d.action, d.answer, d.tool) == ("run", None, add)
    assert d.kwargs == {"a": 2, "b": 0}  # bound: the default is filled in


def test_every_call_that_cannot_run_is_an_answer_without_a_tool() -> None:
    decided = decide_calls(
        [
            ToolCall("c1", "subtract", {"a": 1}),
            ToolCall("c2", "add", {"a": "one"}),
            ToolCall("c3", "add", {}, raw_arguments='{"a": 1,'),
        ],
        set(),
        {},
        (),
        TOOLS,
    )
    assert [(d.action, d.tool, d.kwargs) for d in decided] == [("answer", None, None)] * 3
    unknown, wrong, raw = (d.answer for d in decided)
    assert unknown == ToolFinished(
        "c1", "unknown_tool", "there is no tool named 'subtract'; tools: add, peek, transfer"
    )
    assert wrong is not None and wrong.outcome == "invalid_input" and "a:" in wrong.content
    assert raw is not None and raw.outcome == "invalid_input" and "not a JSON object" in raw.content


def test_a_started_call_runs_again_only_when_it_is_safe_and_its_arguments_bind() -> None:
    assert decide(
        ToolCall("c1", "peek", {"key": "k"}),
        ToolCall("c2", "add", {"a": 1}),
        ToolCall("c3", "peek", {}),
        started=("c1", "c2", "c3"),
    ) == [
        ("run", None, {"key": "k"}),
        ("answer", "unknown_effect", None),  # a write: never repeated
        ("answer", "invalid_input", None),
    ]
    (d,) = decide_calls([ToolCall("c2", "add", {"a": 1})], {"c2"}, {}, (), TOOLS)
    assert d.answer == ToolFinished("c2", "unknown_effect", UNKNOWN_EFFECT)


def test_a_call_to_an_unknown_tool_is_answered_even_if_some_runner_started_it() -> None:
    assert decide(ToolCall("c1", "gone", {}), started=("c1",)) == [("answer", "unknown_tool", None)]


def test_a_call_that_needs_approval_is_asked_about_first_and_bound_only_once_allowed() -> None:
    bad = ToolCall("c1", "transfer", {"amount": "lots"})
    good = ToolCall("c2", "transfer", {"amount": 5})
    # Asked about as the model wrote it, even with arguments that will not bind.
    assert decide(bad, good) == [("request_approval", None, None)] * 2
    assert decide(bad, good, pending=("c1", "c2")) == [("await_approval", None, None)] * 2
    allowed = {c: ApprovalDecided(c, True) for c in ("c1", "c2")}
    assert decide(bad, good, decisions=allowed) == [
        ("answer", "invalid_input", None),
        ("run", None, {"amount": 5}),
    ]
    (denied,) = decide_calls(
        [good], set(), {"c2": ApprovalDecided("c2", False, "too much")}, (), TOOLS
    )
    assert denied.answer == ToolFinished("c2", "denied", "The user denied this call: too much")
    (no_reason,) = decide_calls([good], set(), {"c2": ApprovalDecided("c2", False)}, (), TOOLS)
    assert no_reason.answer == ToolFinished("c2", "denied", "The user denied this call")


# -- what the loop commits -----------------------------------------------------------------


class BatchStore(MemoryStore):
    """A memory store that remembers the event types of each append."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    async def append(
        self,
        session_id: str,
        events: Sequence[Event],
        expected_seq: int,
        lease: Lease | None = None,
        **catalog: Any,  # the row and the admission, passed on as they came
    ) -> None:
        await super().append(session_id, events, expected_seq, lease, **catalog)
        self.batches.append([e.type for e in events])


async def test_calls_that_cannot_run_are_answered_with_the_answer_and_never_started() -> None:
    store = BatchStore()
    model = ScriptedModel([[call("add", a=1), call("nope"), call("add", a="x")], "done"])
    result = await Agent(model, tools=[add], store=store).run("go")

    assert result.stop_reason == "end_turn"
    events = await read_checked(store, result.session_id)
    # The answer, the one start and both answers of calls that cannot run commit together;
    # only the call that runs is answered later.
    answer_batch = next(b for b in store.batches if "model.responded" in b)
    assert answer_batch == ["model.responded", "tool.started", "tool.finished", "tool.finished"]
    finished = {e.payload.call_id: e.payload for e in events if isinstance(e.payload, ToolFinished)}
    assert finished["call_0_1"].outcome == "unknown_tool"
    assert finished["call_0_1"].duration_ms == 0.0
    assert finished["call_0_2"].outcome == "invalid_input"
    assert finished["call_0_0"].outcome == "ok"


# -- typed approval decisions --------------------------------------------------------------


def session_with_decisions() -> Folder:
    calls = (ToolCall("c1", "transfer", {"amount": 5}), ToolCall("c2", "transfer", {"amount": 7}))
    return Folder().apply_all(
        make_events(
            "s1",
            1,
            [
                SessionCreated("m"),
                UserMessage(user("pay")),
                ModelRequested("m", "h", 1),
                ModelResponded(assistant("", calls)),
                ApprovalRequested("c1", "transfer", {"amount": 5}),
                ApprovalRequested("c2", "transfer", {"amount": 7}),
                ApprovalDecided("c1", True),
                ApprovalDecided("c2", False, "not today"),
            ],
        )
    )


def test_the_fold_keeps_each_decision_as_its_event_and_recovery_reads_it() -> None:
    view = session_with_decisions().view()
    assert view.decisions == {
        "c1": ApprovalDecided("c1", True),
        "c2": ApprovalDecided("c2", False, "not today"),
    }
    decided = decide_open_calls(view, TOOLS)
    assert [(d.action, d.kwargs) for d in decided] == [("run", {"amount": 5}), ("answer", None)]
    assert decided[1].answer == ToolFinished("c2", "denied", "The user denied this call: not today")


def test_a_views_json_holds_decisions_as_before_and_reads_back_typed() -> None:
    view = session_with_decisions().view()
    data = view.to_json()
    assert json.dumps(data["decisions"], separators=(",", ":")) == (
        '{"c1":{"allow":true,"reason":null},"c2":{"allow":false,"reason":"not today"}}'
    )
    again = view_from_json(json.loads(json.dumps(data)))
    assert again.decisions == view.decisions
    assert again.to_json() == data
