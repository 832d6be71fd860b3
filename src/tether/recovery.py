"""What to do with what a session leaves open: each unanswered call of the last assistant
message (`decide_calls`: the one place that decides whether a call can run), and the one
batch that closes a turn or a session (`closing`).

Pure: from the session's fold and the tools' properties to decisions and payloads. The loop
uses it at every step, so the same rules serve a running session, one resumed after an
approval and one taken over after a crash; and every closer (a turn's natural end, a cancel,
a worker that cannot run a session, a poisoned session) appends what `closing` returns, in
one batch, so no observer and no crash ever sees a session half closed.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tether.events import (
    ApprovalDecided,
    Effect,
    EndOutcome,
    Outcome,
    Payload,
    SessionEnded,
    ThreadFinished,
    ToolFinished,
    TurnEnded,
)
from tether.fold import Folder
from tether.messages import ToolCall
from tether.state import SessionView
from tether.tools.arguments import bind_arguments
from tether.tools.base import Tool, Toolbox

Action = Literal["run", "answer", "request_approval", "await_approval"]

# How `closing` answers the calls a closed turn leaves unanswered: "keep" leaves them (a turn
# that stops to wait for approvals); "canceled", the run was stopped (a call that was running
# was cancelled with it); "abandoned", nobody runs the session any more (a call started by a
# runner that is gone has unknown effects).
OpenCalls = Literal["keep", "canceled", "abandoned"]

CANCELED_RUNNING = (
    "The call was canceled while it ran: the turn was interrupted. Its effects may be partial."
)
CANCELED_BEFORE = "The call was canceled before it ran: the turn was interrupted."

UNKNOWN_EFFECT = (
    "The run stopped while this call was running, so its effects are unknown: it may or may "
    "not have happened. It was not repeated. Inspect the current state before repeating it."
)
ABANDONED = (
    "The turn was stopped while this call was running on a thread, which cannot be stopped: "
    "it was left running, so its effects are unknown: it may or may not have happened, or "
    "may still be happening. It was not repeated. Inspect the current state before "
    "repeating it."
)


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one call. Action "run": `tool` and `kwargs`, the arguments bound to it
    (the runner takes them over); "answer": the result the call is answered with, never
    having started (an unknown tool, arguments that do not bind, a write a gone runner had
    started, a denial); "request_approval" / "await_approval": the call waits for a
    decision."""

    call: ToolCall
    action: Action
    answer: ToolFinished | None = None
    tool: Tool | None = None
    kwargs: dict[str, Any] | None = None


def decide_open_calls(view: SessionView, toolbox: Toolbox) -> list[Decision]:
    return decide_calls(
        view.open_calls, view.started_calls, view.decisions, view.pending_approvals, toolbox
    )


def decide_calls(
    calls: Iterable[ToolCall],
    started: Container[str],
    decisions: Mapping[str, ApprovalDecided],
    pending_approvals: Container[str],
    toolbox: Toolbox,
) -> list[Decision]:
    """One decision per call: whether it can run, and if so with which arguments. Fresh calls
    of a new answer pass empty `started` and `pending_approvals`, so the loop decides them
    before the answer is even folded."""
    out: list[Decision] = []
    for call in calls:
        tool = toolbox.get(call.name)
        if tool is None:
            out.append(_unknown_tool(call, toolbox))
        elif call.id in started:
            out.append(_started_before(call, tool))
        elif tool.needs_approval:
            out.append(_approval(call, tool, decisions.get(call.id), call.id in pending_approvals))
        else:
            out.append(_run(call, tool))
    return out


def _run(call: ToolCall, tool: Tool) -> Decision:
    """Run it with its bound arguments; arguments that do not bind answer it `invalid_input`.
    Bound only once nothing else stops the call: a call waiting for approval is asked about
    as the model wrote it."""
    kwargs = bind_arguments(tool, call)
    if isinstance(kwargs, str):
        return Decision(call, "answer", ToolFinished(call.id, "invalid_input", kwargs))
    return Decision(call, "run", None, tool, kwargs)


def _unknown_tool(call: ToolCall, toolbox: Toolbox) -> Decision:
    known = ", ".join(toolbox.names()) or "none"
    content = f"there is no tool named {call.name!r}; tools: {known}"
    return Decision(call, "answer", ToolFinished(call.id, "unknown_tool", content))


def _started_before(call: ToolCall, tool: Tool) -> Decision:
    # A call started by an earlier runner that never finished it: repeat only what is safe.
    if tool.effect in ("read", "idempotent"):
        return _run(call, tool)
    return Decision(call, "answer", ToolFinished(call.id, "unknown_effect", UNKNOWN_EFFECT))


def abandoned(effect: Effect) -> tuple[Outcome, str]:
    """How a call is answered that was still running when its turn was stopped and was left
    running (a sync tool's thread): by the rule for a call a gone runner started
    (`_started_before`), except that nobody runs it again in this turn. A write's effects
    are unknown; a read or an idempotent call was merely canceled."""
    if effect == "write":
        return "unknown_effect", ABANDONED
    return "canceled", CANCELED_RUNNING


def _approval(
    call: ToolCall, tool: Tool, decision: ApprovalDecided | None, requested: bool
) -> Decision:
    if decision is None:
        # With its tool, so the request can say what the call would do (its effect class).
        return Decision(call, "await_approval" if requested else "request_approval", tool=tool)
    if decision.allow:
        return _run(call, tool)
    why = f": {decision.reason}" if decision.reason else ""
    return Decision(
        call, "answer", ToolFinished(call.id, "denied", f"The user denied this call{why}")
    )


def closing(
    folder: Folder,
    stop: str,
    detail: str | None = None,
    *,
    calls: OpenCalls = "keep",
    end: EndOutcome | None = None,
    end_detail: str | None = None,
    toolbox: Toolbox | None = None,
    gone: Container[str] | None = None,
) -> list[Payload]:
    """The payloads that close what `folder` has open, to append as ONE batch (each on the
    thread `threads_of` says): with an open turn, an answer for each unanswered call (as
    `calls` says) and `turn.ended` (`stop`, `detail`); unless `calls` is "keep", a
    `thread.finished` (`stop`, `detail`) for each sub-agent thread below that has not
    finished; then, with `end`, `session.ended` (`end_detail`, else `detail`, else `stop`).
    Empty for a session that has ended already.

    With `canceled`, a started call is answered by the rule for a call a gone runner started
    (a `write` is `unknown_effect`) when its id is in `gone` (None: every started call is a
    gone runner's, as for a closer that runs nothing); the others were started by the
    closing run and were cancelled with it. `toolbox`: the tools' effects (without it, every
    such call is taken for a `write`)."""
    if folder.terminal:
        return []
    batch: list[Payload] = []
    if folder.turn_open:
        if calls != "keep":
            # Listed from the fold before any is answered: the answers land in one batch.
            batch.extend(
                _answer(call, call.id in folder.started, calls, detail or stop, toolbox, gone)
                for call in folder.open_calls
                if call.id not in folder.results
            )
        batch.append(TurnEnded(stop, detail))
    if calls != "keep" and (folder.turn_open or end is not None):
        # The sub-agent threads below that never finished end here too: nothing would run
        # them again (their calls are answered, or the session ends).
        batch.extend(
            ThreadFinished(node.thread, "", stop, detail)
            for node in folder.thread_nodes.values()
            if node.status != "finished"
        )
    if end is not None:
        batch.append(SessionEnded(end, end_detail or detail or stop))
    return batch


def threads_of(batch: Sequence[Payload], thread: str) -> list[str]:
    """The thread of each payload of a `closing` batch: a `thread.finished` on the thread
    it ends, the rest on the closer's own `thread`."""
    return [p.thread if isinstance(p, ThreadFinished) else thread for p in batch]


def _answer(
    call: ToolCall,
    started: bool,
    calls: OpenCalls,
    why: str,
    toolbox: Toolbox | None,
    gone: Container[str] | None,
) -> ToolFinished:
    if calls == "canceled" and not (started and (gone is None or call.id in gone)):
        return ToolFinished(call.id, "canceled", CANCELED_RUNNING if started else CANCELED_BEFORE)
    if calls == "canceled":
        # Started by a runner that is gone (a cancel honoured on resume, or by a closer that
        # runs nothing): the rule for a started call (`_started_before`), nothing run again.
        tool = None if toolbox is None else toolbox.get(call.name)
        if tool is not None and tool.effect != "write":
            return ToolFinished(call.id, "canceled", CANCELED_RUNNING)
        return ToolFinished(call.id, "unknown_effect", UNKNOWN_EFFECT)
    if started:
        return ToolFinished(call.id, "unknown_effect", UNKNOWN_EFFECT)
    return ToolFinished(call.id, "canceled", f"The call never ran: {why}")
