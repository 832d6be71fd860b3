"""Stop conditions to reuse: `Agent(stop_when=stops.answer_stable(2))`.

Each ends a turn with a stop reason of its own name (or the `reason` given), and each is a
pure function of the session (its view and the turn's messages), so a process that takes a
session over after a crash decides as the one that ran it would have: none keeps state.

The loop asks a condition after each step, before the next request. A condition here that
reads messages is a `TranscriptCondition`: the loop hands it the transcript beside the view;
`any_of` combines conditions of either kind.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.errors import UsageError
from tether.limits import StopCondition
from tether.messages import Message
from tether.state import SessionView


class TranscriptCondition:
    """A stop condition that reads the transcript as well as the view. The loop calls
    `check(view, messages)`; called as a plain condition, with a view alone, it would have
    to guess, so it refuses (combine conditions with `any_of`, not a lambda)."""

    def check(self, view: SessionView, messages: Sequence[Message]) -> str | None:
        raise NotImplementedError

    def __call__(self, view: SessionView) -> str | None:
        raise UsageError(
            f"{type(self).__name__} reads the transcript: pass it as stop_when itself, or "
            "combine it with tether.stops.any_of"
        )


def check(condition: StopCondition, view: SessionView, messages: Sequence[Message]) -> str | None:
    """What `condition` says of the session: the loop's one way to ask any condition."""
    if isinstance(condition, TranscriptCondition):
        return condition.check(view, messages)
    return condition(view)


class _AnyOf(TranscriptCondition):
    def __init__(self, conditions: Sequence[StopCondition]) -> None:
        self.conditions = tuple(conditions)

    def check(self, view: SessionView, messages: Sequence[Message]) -> str | None:
        for condition in self.conditions:
            reason = check(condition, view, messages)
            if reason:
                return reason
        return None


def any_of(*conditions: StopCondition) -> TranscriptCondition:
    """The first of `conditions` that holds, in the order given."""
    if not conditions:
        raise UsageError("any_of needs at least one condition")
    return _AnyOf(conditions)


class _NoNewToolResults(TranscriptCondition):
    def __init__(self, steps: int, reason: str) -> None:
        self.steps = steps
        self.reason = reason

    def check(self, view: SessionView, messages: Sequence[Message]) -> str | None:
        seen: set[tuple[str, str]] = set()
        names: dict[str, str] = {}  # call id -> the tool it called
        quiet = 0  # the latest steps in a row that brought nothing new
        for message in _this_turn(messages):
            if message.role == "assistant":
                names.update((c.id, c.name) for c in message.tool_calls)
            if message.role != "tool":
                continue
            results = {(names.get(r.call_id, ""), r.content) for r in message.tool_results}
            quiet = 0 if results - seen else quiet + 1
            seen |= results
        return self.reason if quiet >= self.steps else None


def no_new_tool_results(steps: int, *, reason: str = "no_new_tool_results") -> TranscriptCondition:
    """Stop when the last `steps` tool steps of the turn returned only results (tool name and
    content) the turn had already seen: an agent going round in circles."""
    if steps < 1:
        raise UsageError(f"no_new_tool_results needs steps >= 1, not {steps}")
    return _NoNewToolResults(steps, reason)


class _AnswerStable(TranscriptCondition):
    def __init__(self, steps: int, reason: str) -> None:
        self.steps = steps
        self.reason = reason

    def check(self, view: SessionView, messages: Sequence[Message]) -> str | None:
        texts = [" ".join(m.text.split()) for m in _this_turn(messages) if m.role == "assistant"]
        last = texts[-self.steps :]
        if len(last) < self.steps or not last[0] or any(t != last[0] for t in last):
            return None
        return self.reason


def answer_stable(steps: int, *, reason: str = "answer_stable") -> TranscriptCondition:
    """Stop when the model's last `steps` answers of the turn said the same non-empty text
    (whitespace aside) while still calling tools: its answer has stopped changing."""
    if steps < 2:
        raise UsageError(
            f"answer_stable needs steps >= 2 (one answer is always stable), not {steps}"
        )
    return _AnswerStable(steps, reason)


def cost_over(usd: float, *, reason: str = "cost_over") -> StopCondition:
    """Stop once the session's known cost (every thread's) is over `usd`. Unlike
    `Limits.max_cost_usd`, which refuses a request its estimate would overspend, this lets a
    step finish and stops after it; with no price known it never stops."""
    if usd < 0:
        raise UsageError(f"cost_over needs usd >= 0, not {usd}")

    def over(view: SessionView) -> str | None:
        return reason if view.cost_usd is not None and view.cost_usd > usd else None

    return over


def _this_turn(messages: Sequence[Message]) -> Sequence[Message]:
    """The messages after the turn's user message (a handoff's thread has none: all)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return messages[index + 1 :]
    return messages
