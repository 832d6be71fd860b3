"""A replay's cassette of tool results: the calls a recorded session made after a fork point,
with their results, served to the calls of the replay that repeat them (the same tool and
the same arguments, in the order made, each result at most once) instead of running them.
A call that repeats none runs live only as the caller allows (`Live`), and a `write` tool
only when asked. It decides; the loop commits its answers as it does any other decision.
Reading the recorded session and running the replay are `session/replay.py`'s."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from tether.errors import UsageError
from tether.events import Event, ModelResponded, Outcome, ToolFinished
from tether.messages import ToolCall, canonical_json
from tether.recovery import Decision
from tether.tools.base import Tool

# Which calls that repeat no recorded one run: none; reads (`read` and `idempotent` tools);
# all (`write` tools too: their effects happen again, so only when the caller asks).
Live = Literal["none", "reads", "all"]
LIVE: tuple[Live, ...] = ("none", "reads", "all")
# A recorded call served again is one that ran: a denial, a cancel, an unknown effect or a
# call that never bound says nothing of what the tool answers.
SERVABLE: frozenset[Outcome] = frozenset({"ok", "error", "timeout"})


@dataclass(frozen=True, slots=True)
class Recorded:
    """A call of the recorded session and its result (`event_id`: its `tool.finished`)."""

    name: str
    arguments: str  # canonical JSON
    result: ToolFinished
    event_id: str


def recorded_calls(events: Iterable[Event]) -> list[Recorded]:
    """The main thread's calls in `events` with a result a replay may serve, in the order the
    model made them (a sub-agent's own calls run on its thread with its own tools)."""
    calls: dict[str, ToolCall] = {}
    results: dict[str, tuple[ToolFinished, str]] = {}
    for event in events:
        payload = event.payload
        if event.thread:
            continue
        if isinstance(payload, ModelResponded):
            for made in payload.message.tool_calls:
                calls[made.id] = made
        elif isinstance(payload, ToolFinished) and payload.outcome in SERVABLE:
            results[payload.call_id] = (payload, event.id)
    return [
        Recorded(c.name, canonical_json(c.arguments), *results[c.id])
        for c in calls.values()
        if c.id in results
    ]


def check_live(live: str) -> Live:
    for known in LIVE:
        if live == known:
            return known
    raise UsageError(f"live must be one of {', '.join(LIVE)}, not {live!r}")


class ToolCassette:
    """The recorded results of `source` not yet served (`used`: the `tool.finished` ids a
    replay's log already names, so a resumed replay serves none twice), and the policy for
    the calls that repeat none. `served`, `ran` and `refused` count this object's decisions."""

    def __init__(
        self,
        recorded: Iterable[Recorded],
        *,
        source: str,
        live: Live = "reads",
        used: Iterable[str] = (),
    ) -> None:
        self.source = source
        self.live = check_live(live)
        spent = set(used)
        self._queues: dict[tuple[str, str], deque[Recorded]] = {}
        for r in recorded:
            if r.event_id not in spent:
                self._queues.setdefault((r.name, r.arguments), deque()).append(r)
        self.served = self.ran = self.refused = 0

    def decide(self, decisions: list[Decision]) -> list[Decision]:
        """The decisions with each fresh call that would run (or ask for approval) answered
        from the cassette, or refused by the policy; the others as they were."""
        return [self._decide(d) for d in decisions]

    def _decide(self, decision: Decision) -> Decision:
        call, tool = decision.call, decision.tool
        if tool is None or decision.action not in ("run", "request_approval"):
            return decision
        # A handoff is never served: its recorded result stood for the rest of a turn.
        handoff = tool.subagent is not None and tool.subagent.handoff
        queue = None if handoff else self._queues.get((call.name, canonical_json(call.arguments)))
        if queue:
            hit = queue.popleft()
            self.served += 1
            r = hit.result
            answer = ToolFinished(call.id, r.outcome, r.content, 0.0, r.images, hit.event_id)
            return Decision(call, "answer", answer)
        why = self._refusal(tool)
        if why is None:
            self.ran += 1
            return decision
        self.refused += 1
        return Decision(call, "answer", ToolFinished(call.id, "denied", why))

    def _refusal(self, tool: Tool) -> str | None:
        """Why a call that repeats no recorded one may not run live; None: it may."""
        if self.live == "all" or (self.live == "reads" and not may_write(tool)):
            return None
        if self.live == "none":
            rule = "this replay runs no tool live (live='none')"
        else:
            who = tool.name if tool.subagent is None else f"{tool.name} has tools that"
            rule = (
                f"{who} may write (effect='write'): a replay runs write tools live only when "
                "asked (live='all')"
            )
        return (
            f"Not run: this replay of session {self.source} holds no recorded result for "
            f"this call, and {rule}."
        )


def may_write(tool: Tool, seen: frozenset[int] = frozenset()) -> bool:
    """Whether running `tool` may write: a `write` tool, or a sub-agent (or handoff) with a
    tool that may, at any depth (its calls run on its thread, outside the cassette)."""
    if tool.subagent is None:
        return tool.effect == "write"
    toolbox = tool.subagent.engine.toolbox
    if id(toolbox) in seen:  # agents that hand off to each other
        return False
    return any(may_write(t, seen | {id(toolbox)}) for t in toolbox)
