"""What to do with each unanswered call of the last assistant message.

Pure: from the session view and the tool's properties to one decision per call. The loop
uses it at every step, so the same rules serve a running session, one resumed after an
approval and one taken over after a crash.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from tether.messages import ToolCall
from tether.state import SessionView
from tether.tools.base import Tool, Toolbox

Action = Literal["run", "answer", "request_approval", "await_approval"]

UNKNOWN_EFFECT = (
    "The run stopped while this call was running, so its effects are unknown: it may or may "
    "not have happened. It was not repeated. Inspect the current state before repeating it."
)


@dataclass(frozen=True, slots=True)
class Decision:
    call: ToolCall
    action: Action
    outcome: str = ""  # for action "answer"
    content: str = ""


def decide_open_calls(view: SessionView, toolbox: Toolbox) -> list[Decision]:
    return decide_calls(
        view.open_calls, view.started_calls, view.decisions, view.pending_approvals, toolbox
    )


def decide_calls(
    calls: Iterable[ToolCall],
    started: Container[str],
    decisions: Mapping[str, object],
    pending_approvals: Container[str],
    toolbox: Toolbox,
) -> list[Decision]:
    """One decision per call. Fresh calls of a new answer pass empty `started` and
    `pending_approvals`, so the loop decides them before the answer is even folded."""
    out: list[Decision] = []
    for call in calls:
        tool = toolbox.get(call.name)
        if tool is None:
            out.append(Decision(call, "run"))  # the runner answers unknown_tool
        elif call.id in started:
            out.append(_started_before(call, tool))
        elif tool.needs_approval:
            out.append(_approval(call, decisions.get(call.id), call.id in pending_approvals))
        else:
            out.append(Decision(call, "run"))
    return out


def _started_before(call: ToolCall, tool: Tool) -> Decision:
    # A call started by an earlier runner that never finished it: repeat only what is safe.
    if tool.effect in ("read", "idempotent"):
        return Decision(call, "run")
    return Decision(call, "answer", "unknown_effect", UNKNOWN_EFFECT)


def _approval(call: ToolCall, decision: object, requested: bool) -> Decision:
    if isinstance(decision, dict):
        if decision.get("allow"):
            return Decision(call, "run")
        reason = decision.get("reason")
        why = f": {reason}" if reason else ""
        return Decision(call, "answer", "denied", f"The user denied this call{why}")
    return Decision(call, "await_approval" if requested else "request_approval")
