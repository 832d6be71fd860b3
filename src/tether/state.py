"""Session states, stop reasons, the `SessionView` a fold produces, and what successive
observations of one session may do. Pure: nothing here reads a clock or a store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tether.errors import TetherError
from tether.events import ApprovalDecided, CancelScope, EndOutcome, ForkKind, InputRequested
from tether.messages import JSONObject, JSONValue, ToolCall, Usage

State = Literal[
    "pending",
    "waiting_model",
    "waiting_tool",
    "waiting_approval",
    "waiting_input",
    "canceling",
    "idle",
    "completed",
    "failed",
    "canceled",
]
TERMINAL_STATES: frozenset[str] = frozenset({"completed", "failed", "canceled"})

# Named stop reasons of a turn; a custom stop condition adds its own name.
STOP_REASONS: frozenset[str] = frozenset(
    {
        "end_turn",
        "awaiting_approval",
        "budget",
        "turn_limit",
        "time_limit",
        "output_limit",
        "interrupted",
        "error",
        "output_invalid",
    }
)


# Stop reasons after which a session that ends with its turn is not over yet: it waits for a
# decision, or someone interrupted it to steer it.
NOT_FINAL_STOPS: frozenset[str] = frozenset({"awaiting_approval", "interrupted"})


def session_outcome(stop_reason: str) -> EndOutcome | None:
    """How a session that ends with its turn ends: `completed` after `end_turn` or a custom
    stop condition, `failed` after an error or a limit, None when the turn is not final."""
    if stop_reason in NOT_FINAL_STOPS:
        return None
    return "completed" if stop_reason == "end_turn" or stop_reason not in STOP_REASONS else "failed"


def parent_thread(thread: str) -> str:
    """The thread that started `thread`: its path without the last part ("" is the main one)."""
    return thread.rpartition("/")[0]


def approval_key(thread: str, call_id: str) -> str:
    """How a call waiting for approval is named session-wide: its id on the main thread,
    `THREAD:CALL_ID` in a sub-agent's (thread ids hold no ':')."""
    return f"{thread}:{call_id}" if thread else call_id


@dataclass(frozen=True, slots=True)
class ThreadNode:
    """One sub-agent thread of a session: who runs it, for which call of which thread, and
    where it stands (`running`, `waiting_approval`, `stopped` when its turn was cut short
    and its caller's closer has not yet ended it, or `finished` with the stop reason of its
    last turn, or of the closer that ended it)."""

    thread: str
    agent: str
    parent_call_id: str | None
    status: str = "running"
    stop_reason: str | None = None
    handoff: bool = False

    @property
    def parent(self) -> str:
        return parent_thread(self.thread)

    def to_json(self) -> JSONObject:
        return {
            "thread": self.thread,
            "parent": self.parent,
            "agent": self.agent,
            "parent_call_id": self.parent_call_id,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "handoff": self.handoff,
        }


@dataclass(frozen=True, slots=True)
class ForkOrigin:
    """Where a forked session came from (its `session.forked`): the parent, the parent's seq
    its log shares up to, and the kind of fork."""

    parent: str
    parent_seq: int
    kind: ForkKind = "fork"

    def to_json(self) -> JSONObject:
        return {"parent": self.parent, "parent_seq": self.parent_seq, "kind": self.kind}


@dataclass(frozen=True, slots=True)
class SessionView:
    """What a session is doing, derived from its log and never stored beside it.

    `open_calls` are the calls of the last assistant message with no result yet, in call
    order; `started_calls` the subset whose `tool.started` is in the log. `decisions` holds
    the approval decisions by call id, each as its `approval.decided` payload (`allow`,
    `reason`); a call of a sub-agent's thread is named `THREAD:CALL_ID` there
    (`approval_key`). `steps` counts model answers over the whole session, `turn_steps`
    those of the current turn, each with every sub-agent thread's; `threads` is the tree of
    sub-agent threads, in the order they started. `pending_inputs` holds the elicitations
    of running calls that wait for an answer, by call id (named like approvals), each as
    its `input.requested` payload: what to ask, and the schema an answer must meet.
    `forked`: where a fork came from (None: not a fork)."""

    session_id: str = ""
    state: State = "pending"
    stop_reason: str | None = None
    stop_detail: str | None = None
    model: str = ""
    usage: Usage = Usage()
    cost_usd: float | None = None
    steps: int = 0
    turn_steps: int = 0
    turns: int = 0
    last_seq: int = 0
    last_output: str = ""
    open_calls: tuple[ToolCall, ...] = ()
    started_calls: frozenset[str] = frozenset()
    pending_approvals: tuple[str, ...] = ()
    decisions: dict[str, ApprovalDecided] = field(default_factory=dict)
    cancel_scope: CancelScope | None = None
    model_request_open: bool = False
    transcript_chars: int = 0
    threads: tuple[ThreadNode, ...] = ()
    pending_inputs: dict[str, InputRequested] = field(default_factory=dict)
    forked: ForkOrigin | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def to_json(self) -> JSONObject:
        return {
            "session_id": self.session_id,
            "state": self.state,
            "stop_reason": self.stop_reason,
            "stop_detail": self.stop_detail,
            "model": self.model,
            "usage": self.usage.to_json(),
            "cost_usd": self.cost_usd,
            "steps": self.steps,
            "turn_steps": self.turn_steps,
            "turns": self.turns,
            "last_seq": self.last_seq,
            "last_output": self.last_output,
            "open_calls": [c.to_json() for c in self.open_calls],
            "started_calls": list[JSONValue](sorted(self.started_calls)),
            "pending_approvals": list[JSONValue](self.pending_approvals),
            "decisions": {
                call_id: {"allow": d.allow, "reason": d.reason}
                for call_id, d in self.decisions.items()
            },
            "cancel_scope": self.cancel_scope,
            "model_request_open": self.model_request_open,
            "threads": [t.to_json() for t in self.threads],
            # Written only when some input waits, or for a fork: every older view keeps its
            # bytes (a poll's status always says `forked`, null for none).
            **(
                {"pending_inputs": _inputs_json(self.pending_inputs)} if self.pending_inputs else {}
            ),
            **({"forked": self.forked.to_json()} if self.forked is not None else {}),
        }


def _inputs_json(inputs: dict[str, InputRequested]) -> JSONObject:
    return {
        key: {
            "call_id": p.call_id,
            "server": p.server,
            "message": p.message,
            "schema": p.schema,
            "key": p.key,
        }
        for key, p in inputs.items()
    }


class InvalidObservation(TetherError):
    """Two successive observations of one session contradict the lifecycle."""


def validate_observation(previous: SessionView, current: SessionView) -> None:
    """Raise `InvalidObservation` if `current` cannot follow `previous` for one session."""
    problems: list[str] = []
    if previous.session_id != current.session_id:
        problems.append(f"session id changed from {previous.session_id} to {current.session_id}")
    if previous.terminal and current.state != previous.state:
        problems.append(f"terminal state {previous.state} changed to {current.state}")
    for name in ("last_seq", "steps", "turns"):
        before, after = getattr(previous, name), getattr(current, name)
        if after < before:
            problems.append(f"{name} went down from {before} to {after}")
    for name in ("input_tokens", "output_tokens"):
        before, after = getattr(previous.usage, name), getattr(current.usage, name)
        if after < before:
            problems.append(f"usage.{name} went down from {before} to {after}")
    if (
        previous.cost_usd is not None
        and current.cost_usd is not None
        and current.cost_usd < previous.cost_usd
    ):
        problems.append(f"cost went down from {previous.cost_usd} to {current.cost_usd}")
    if problems:
        raise InvalidObservation("; ".join(problems))
