"""Sub-agents as threads of one session: an agent offered as a tool, or as a handoff.

A call to a sub-agent's tool opens a thread in the caller's session, in the same commit as
the call's `tool.started`: `thread.started` (who runs it) and the task as its first user
message, both on the new thread. The thread's turn runs through `loop.run_turn` like any
turn, on a branch of the session's log (`SessionLog.branch`), under the session's lease
and inside the caller's call; when it ends, `thread.finished` records its answer, which
becomes the call's result. A handoff is the same, except that the thread takes over the
conversation so far and its answer ends the caller's turn.

Recovery needs nothing of its own: a sub-agent's tool is `idempotent`, so a call a gone
runner started is run again, and running it finds the thread in the log: a finished
thread gives its answer without running, an open one goes on from its own fold (its
calls by the recovery rules), and only a call that never got a thread starts one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from tether.errors import UsageError
from tether.events import (
    ModelResponded,
    Payload,
    ThreadFinished,
    ThreadStarted,
    ToolFinished,
    UserMessage,
)
from tether.messages import Message, user
from tether.recovery import Decision
from tether.state import session_outcome
from tether.tools.run import CallCanceled, CallOutcome, cap_output

if TYPE_CHECKING:
    from tether.loop import Engine, TurnContext

# What a handoff takes of the conversation so far (every message before the answer that
# asked for it, which a provider would refuse without its calls' results): all, by default.
HistoryFilter = Callable[[tuple[Message, ...]], Sequence[Message]]

DEFAULT_MAX_DEPTH = 3  # a sub-agent's sub-agent's sub-agent, and no deeper
DEFAULT_MAX_THREADS = 8  # sub-agent threads running at once in one session


class ThreadGate(Protocol):
    """Threads counted across the sessions of a tenant (a runtime's quota): asked before a
    sub-agent's thread opens, told when it is over."""

    async def enter_thread(self, tenant: str) -> str | None:
        """Count one more thread of `tenant`; or, counting nothing, why it may not start."""
        ...

    def leave_thread(self, tenant: str) -> None: ...


@dataclass(frozen=True, slots=True)
class SubAgent:
    """What runs a sub-agent's thread: its name (the thread ids' stem), engine and system
    prompt; `handoff`: it takes the rest of its caller's turn, with its conversation."""

    name: str
    engine: Engine
    system: str | None = None
    handoff: bool = False
    history_filter: HistoryFilter | None = None


def check_name(name: str) -> str:
    """A sub-agent's name names tools and thread ids: letters, digits, '_' and '-'."""
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise UsageError(
            f"a sub-agent's name must be letters, digits, '_' or '-' (it names a tool and "
            f"its threads), not {name!r}"
        )
    return name


def admit(ctx: TurnContext, decisions: list[Decision], fresh: bool) -> list[Decision]:
    """The decisions with every sub-agent call beyond the session's caps answered instead
    (too deep, too many threads at once, a second handoff in one answer). A call resumed
    with its thread already in the log is never refused: it is running already."""
    root = ctx.root
    depth_cap, threads_cap = root.engine.max_depth, root.engine.max_threads
    running = root.threads_running
    out: list[Decision] = []
    handoff_taken = False
    for d in decisions:
        sub = d.tool.subagent if d.action == "run" and d.tool is not None else None
        if sub is None or (not fresh and d.call.id in ctx.log.folder.call_threads):
            out.append(d)
            continue
        why = None
        if ctx.depth + 1 > depth_cap:
            why = f"it would run {ctx.depth + 1} sub-agents deep (max_depth={depth_cap})"
        elif running >= threads_cap:
            why = f"{running} sub-agent threads are running already (max_threads={threads_cap})"
        elif sub.handoff and handoff_taken:
            why = "another handoff in the same answer was taken"
        if why is not None:
            content = f"sub-agent {sub.name} was not started: {why}"
            out.append(Decision(d.call, "answer", ToolFinished(d.call.id, "error", content)))
            continue
        running += 1
        handoff_taken = handoff_taken or sub.handoff
        out.append(d)
    return out


async def gate(ctx: TurnContext, decisions: list[Decision], fresh: bool) -> list[Decision]:
    """The decisions `admit` let through, each new sub-agent thread asked of the session
    engine's `thread_gate` (the tenant's threads): one it refuses is answered with why.
    Each one let through is counted until its thread's run is over (`run_thread`), or, if
    it never ran, until the session's turn is (`release`)."""
    root = ctx.root
    threads_gate = root.engine.thread_gate
    if threads_gate is None or ctx.caller is None:
        return decisions
    out: list[Decision] = []
    for d in decisions:
        sub = d.tool.subagent if d.action == "run" and d.tool is not None else None
        if sub is None or (not fresh and d.call.id in ctx.log.folder.call_threads):
            out.append(d)
            continue
        why = await threads_gate.enter_thread(ctx.caller.tenant)
        if why is not None:
            content = f"sub-agent {sub.name} was not started: {why}"
            out.append(Decision(d.call, "answer", ToolFinished(d.call.id, "error", content)))
            continue
        root.gated.add(_gated(ctx, d.call.id))
        out.append(d)
    return out


def _gated(ctx: TurnContext, call_id: str) -> str:
    """A call's key among the counted ones: call ids repeat across threads."""
    return f"{ctx.log.thread}\x00{call_id}"


def release(ctx: TurnContext, call_id: str | None = None) -> None:
    """Uncount the gated thread of the caller's call `call_id`, or, with None, every one
    the session still counts."""
    root = ctx.root
    threads_gate = root.engine.thread_gate
    if threads_gate is None or ctx.caller is None:
        return
    for gated in [_gated(ctx, call_id)] if call_id is not None else list(root.gated):
        if gated in root.gated:
            root.gated.discard(gated)
            threads_gate.leave_thread(ctx.caller.tenant)


def opening(
    ctx: TurnContext, decisions: Sequence[Decision], fresh: bool
) -> dict[str, tuple[str, list[Payload]]]:
    """By call id, for each sub-agent call to run that has no thread yet: its new thread's
    id and first events (`thread.started`, and the task as its user message). Ids are
    `NAME-N` (N counts the threads this one started), under the caller's path."""
    folder = ctx.log.folder
    number = folder.children_started
    threads: dict[str, tuple[str, list[Payload]]] = {}
    for d in decisions:
        sub = d.tool.subagent if d.action == "run" and d.tool is not None else None
        if sub is None or (not fresh and d.call.id in folder.call_threads):
            continue
        number += 1
        name = f"{sub.name}-{number}"
        thread = f"{ctx.log.thread}/{name}" if ctx.log.thread else name
        history: tuple[Message, ...] = ()
        if sub.handoff:
            history = _taken_over(folder.messages, sub.history_filter)
        started = ThreadStarted(
            thread, sub.name, d.call.id, sub.engine.model.name, sub.system, sub.handoff, history
        )
        if sub.handoff:
            threads[d.call.id] = (thread, [started])
        else:
            task = str((d.kwargs or {}).get("task", ""))
            threads[d.call.id] = (thread, [started, UserMessage(user(task))])
    return threads


def _taken_over(
    messages: Sequence[Message], history_filter: HistoryFilter | None
) -> tuple[Message, ...]:
    """The conversation a handoff takes over: the caller's, up to the answer that asked for
    the handoff (the messages folded so far: that answer is not yet), filtered."""
    history = tuple(messages)
    if history_filter is not None:
        history = tuple(history_filter(history))
    if not history:
        raise UsageError("a handoff's history filter left no messages to hand over")
    return history


async def run_thread(ctx: TurnContext, decision: Decision) -> CallOutcome | None:
    """Run (or go on with) the thread of a sub-agent call, and the call's result from its
    end; None while the thread waits for an approval (the call stays open, and so does
    the caller's turn, which stops `awaiting_approval` in turn)."""
    from tether.loop import TurnContext, run_turn

    tool = decision.tool
    assert tool is not None and tool.subagent is not None
    sub: SubAgent = tool.subagent
    started = time.perf_counter()
    thread = ctx.log.folder.call_threads.get(decision.call.id)
    if thread is None:  # cannot happen: the thread opens with the call's start
        return CallOutcome("error", f"sub-agent {sub.name}: the call has no thread in the log")
    branch = await ctx.log.load_branch(thread)
    engine = _engine_under(ctx, sub)
    root = ctx.root
    root.threads_running += 1
    try:
        folder = branch.folder
        while folder.finished is None and folder.turn_open:
            seen = folder.last_seq
            child = TurnContext(branch, engine, caller=ctx.caller, parent=ctx)
            try:
                await run_turn(child)
            except asyncio.CancelledError:
                took = round((time.perf_counter() - started) * 1000, 3)
                what = f"the sub-agent {sub.name} (thread {thread}) was stopped: {root.stop_cause}"
                raise CallCanceled(CallOutcome("canceled", what, took)) from None
            if folder.last_seq == seen:
                break  # nothing happened: never spin
        if folder.finished is None:
            if folder.turn_open or folder.stop_reason in (None, "awaiting_approval"):
                return None  # waiting for a decision (or for a runner to go on)
            await branch.append(
                ThreadFinished(
                    thread, folder.last_output, folder.stop_reason or "end_turn", folder.stop_detail
                )
            )
        assert folder.finished is not None
        return _result(sub, folder.finished, tool.output_cap, started)
    finally:
        root.threads_running -= 1
        release(ctx, decision.call.id)
        branch.close()


def _engine_under(ctx: TurnContext, sub: SubAgent) -> Engine:
    """The sub-agent's engine with the settings it runs with under this caller: the
    caller's run settings under its own (`settings.inherited`)."""
    parent, own = ctx.engine.settings, sub.engine.settings
    if parent is None:
        return sub.engine
    from tether.settings import inherited

    settings = inherited(parent, own)
    return sub.engine if settings == own else replace(sub.engine, settings=settings)


def _result(sub: SubAgent, end: ThreadFinished, cap: int, started: float) -> CallOutcome:
    """The caller's result of a finished thread: its answer, or how it stopped, as data."""
    took = round((time.perf_counter() - started) * 1000, 3)
    if session_outcome(end.stop_reason) == "completed":
        text = end.output
        outcome: CallOutcome = CallOutcome("ok", cap_output(text, cap), took)
    else:
        detail = f" ({end.detail})" if end.detail else ""
        last = f"; its last output: {end.output}" if end.output else ""
        text = f"sub-agent {sub.name} stopped: {end.stop_reason}{detail}{last}"
        outcome = CallOutcome("error", cap_output(text, cap), took)
    if len(text) > cap:
        return CallOutcome(outcome.outcome, outcome.content, took, text)
    return outcome


def fresh_answer(first: Sequence[Payload]) -> bool:
    """Whether a batch's calls come with their answer (new calls, no thread yet)."""
    return any(isinstance(p, ModelResponded) for p in first)
