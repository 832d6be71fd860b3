"""The agent loop: fold → check → request → model → commit → tools → commit → again.

Orchestration only. Limits live in `limits`, call decisions in `recovery`, running calls in
`tools.run`, meaning in `fold`. Every exit appends exactly one `turn.ended` with its reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Container
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from tether import stops
from tether.context.blobs import keep_output
from tether.context.manager import ContextManager
from tether.errors import ContextOverflow, Parked, ProviderError
from tether.events import (
    ApprovalRequested,
    ModelFailed,
    ModelRequested,
    ModelResponded,
    Payload,
    ToolFinished,
    ToolStarted,
    UserMessage,
)
from tether.fold import Folder
from tether.limits import Limits, Stop, StopCondition, check_before_request, estimate_input_tokens
from tether.messages import ToolCall, foreign_thinking
from tether.providers.base import Caller, DeltaObserver, FirstDelta, Model, ModelRequest
from tether.recovery import Decision, closing, decide_calls, decide_open_calls, threads_of
from tether.retrying import DEFAULT_RETRY, complete
from tether.scheduler.retry import RetryPolicy
from tether.session import threads
from tether.session.inputs import LogAsker
from tether.session.log import SessionLog
from tether.session.threads import DEFAULT_MAX_DEPTH, DEFAULT_MAX_THREADS
from tether.state import session_outcome
from tether.tools.base import Toolbox
from tether.tools.cassette import ToolCassette
from tether.tools.inputs import ASKER
from tether.tools.run import CallOutcome, run_calls
from tether.tools.schema import LeaseHolder

if TYPE_CHECKING:  # the settings and output modules are loaded by whoever uses them
    from tether.output import OutputType
    from tether.settings import ModelSettings

# Why a run is stopped from outside its turn: the first two close the turn by that name;
# after the last two the run writes nothing more (another worker has the session, or will).
StopCause = Literal["interrupted", "time_limit", "lease_lost", "handed_over"]
WRITES_NOTHING: frozenset[StopCause] = frozenset({"lease_lost", "handed_over"})


@dataclass(frozen=True, slots=True)
class Engine:
    """What runs a session's turns: its model and tools, the limits of each turn, and the
    policies around the model call. Built once and shared by every session it runs."""

    model: Model
    toolbox: Toolbox
    limits: Limits
    stop_when: StopCondition | None = None
    # Retries of a failed model call (None: one attempt); a gateway's model retries there.
    retry: RetryPolicy | None = DEFAULT_RETRY
    # Clears and compacts the transcript before a request passes its budget; None: off.
    context: ContextManager | None = None
    # Sub-agent threads: how deep they may nest, and how many may run at once (those of
    # the session's main engine hold for the whole session).
    max_depth: int = DEFAULT_MAX_DEPTH
    max_threads: int = DEFAULT_MAX_THREADS
    # Threads counted across the sessions of the caller's tenant (a runtime's quota).
    thread_gate: threads.ThreadGate | None = None
    # How each request is sampled and shaped (None: the provider's defaults); a run's own
    # settings come as a copy of the engine with them merged in (`Agent.run(settings=)`).
    settings: ModelSettings | None = None
    # The final answer's type (`Agent(output_type=)`): checked before a turn ends on it.
    output: OutputType | None = None
    # Its runs' delta observers feed a runtime's live streams (a worker's engines): each
    # request with an observer is `live` (`ModelRequest.live`: streamed, and retried after
    # output as readers of the log expect).
    live: bool = False
    # A replay's recorded tool results (`tools/cassette.py`): they answer the fresh calls
    # that repeat recorded ones, and its policy decides which others run live.
    cassette: ToolCassette | None = None


@dataclass
class TurnContext:
    log: SessionLog
    engine: Engine
    on_delta: DeltaObserver | None = None
    started_at: float = field(default_factory=time.monotonic)
    # Why the run was stopped (`stop`); "interrupted" until someone says otherwise.
    stop_cause: StopCause = "interrupted"
    # End the session with a final turn (a one-shot task): see `_closing`.
    end_after_turn: bool = False
    # Whose requests these are, for a model shared by many sessions (a runtime's gateway).
    caller: Caller | None = None
    # Tokens the model counted for its last request and answer: the next request holds
    # both, so it is a floor under the character estimate when the budget is checked.
    last_request_tokens: int = 0
    # Turns the log had closed when this run began: a turn opened after the one this run
    # closed (a message sent meanwhile) is not this run's to close on cancel.
    turns_before: int | None = None
    # A sub-agent's turn: the turn of the call that runs it (None for the session's own).
    parent: TurnContext | None = None
    # Tokens and dollars the model requests of this turn and those below it have in flight:
    # counted against its limits as if spent, so parallel sub-agents cannot all pass a
    # check that only one of them fits (reserve, then settle when the answer is folded).
    reserved_tokens: int = 0
    reserved_cost: float = 0.0
    threads_running: int = 0  # on the session's own turn: sub-agent threads running now
    gated: set[str] = field(default_factory=set)  # on it too: calls the thread gate counts
    # The calls started and unanswered when this run began: a gone runner's (`closing`).
    started_before: frozenset[str] = frozenset()
    # The lease the run holds, as its tools see it (`ToolContext.fence`); on the root only.
    fence: LeaseHolder | None = None
    # The toolbox version whose set this run's log already names (`_offered`): a toolbox
    # that was not replaced since needs no look, so a plain step pays one comparison.
    tools_checked: int = -1
    # The last request sent without a delta observer: the next step sends it again while
    # nothing it holds has changed (`_request`).
    last_request: ModelRequest | None = None

    def __post_init__(self) -> None:
        if self.turns_before is None:
            self.turns_before = self.log.folder.turns
        if self.log.folder.started:
            self.started_before = frozenset(self.log.folder.started)

    @property
    def root(self) -> TurnContext:
        """The session's own turn, which every sub-agent's turn runs inside."""
        ctx = self
        while ctx.parent is not None:
            ctx = ctx.parent
        return ctx

    @property
    def depth(self) -> int:
        return 0 if self.parent is None else self.parent.depth + 1

    def stop(self, cause: StopCause) -> None:
        """Record why the run is being stopped; the caller then cancels its task. A run that
        must write nothing more keeps that cause whatever comes after it."""
        if not self.writes_nothing:
            self.stop_cause = cause

    @property
    def writes_nothing(self) -> bool:
        """The runner stopped for good: its lease is lost, or it handed the session over
        (the turn stays open for whoever runs the session next). A sub-agent's turn stops
        with the session's."""
        return self.root.stop_cause in WRITES_NOTHING


async def run_turn(ctx: TurnContext) -> None:
    """Drive the session until its turn ends. On cancel, answer every open call `canceled`,
    close the turn with `ctx.stop_cause` (shielded), and let the cancel propagate."""
    try:
        await _drive(ctx)
    except asyncio.CancelledError:
        await asyncio.shield(_close_cancelled(ctx))
        raise
    finally:
        if ctx.parent is None and ctx.gated:  # admitted threads that never ran
            threads.release(ctx)


async def _drive(ctx: TurnContext) -> None:
    folder = ctx.log.folder
    while True:
        if folder.terminal or not folder.turn_open:
            return
        if folder.cancel_scope:
            await _close_cancelled(ctx)
            return
        if folder.handoff is not None:  # the turn went to another agent, and it answered
            agent = folder.thread_nodes[folder.handoff.thread].agent
            await _end(ctx, Stop("end_turn", f"handed off to {agent}"))
            return
        if folder.open_calls:  # left open by an earlier runner, or waiting on a decision
            decisions = decide_open_calls(folder.view(), ctx.engine.toolbox)
            if not await _settle_calls(ctx, decisions, ()):
                return
            continue
        if ctx.engine.output is not None:  # a final_result call answered: accepted, or not
            stop = ctx.engine.output.answered(folder.messages)
            if stop is not None:
                await _end(ctx, stop)
                return
        if ctx.engine.toolbox.followers:  # tools that may have changed since the last step
            await ctx.engine.toolbox.refresh()
        stop = _check(ctx)
        if stop is not None:
            await _end(ctx, stop)
            return
        if not await _step(ctx):
            return


def _check(ctx: TurnContext) -> Stop | None:
    """Whether the next request may go: this turn's stop condition, then the limits of this
    turn and of every turn it runs inside (a sub-agent's own limits are carved from what
    its callers have left: whichever is tighter stops it)."""
    folder = ctx.log.folder
    if ctx.engine.stop_when is not None and folder.turn_steps > 0:
        reason = stops.check(ctx.engine.stop_when, folder.view(), folder.messages)
        if reason:
            return Stop(reason, f"stop condition {reason!r} held after step {folder.steps}")
    estimate = max(_input_estimate(ctx), ctx.last_request_tokens)
    estimate_cost = getattr(ctx.engine.model, "estimate_cost", None)
    cost_estimate = estimate_cost(estimate) if callable(estimate_cost) else None
    now = time.monotonic()
    turn: TurnContext | None = ctx
    while turn is not None:
        counted = turn.log.folder
        stop = check_before_request(
            turn.engine.limits,
            turn_steps=counted.turn_steps,
            tokens_used=counted.total_tokens + turn.reserved_tokens,
            cost_usd=(counted.cost_usd or 0.0) + turn.reserved_cost,
            cost_known=counted.cost_known,
            input_estimate=estimate,
            input_cost_estimate=cost_estimate,
            elapsed_seconds=now - turn.started_at,
        )
        if stop is not None:
            if turn is not ctx:
                whose = f"thread {turn.log.thread}" if turn.log.thread else "the session"
                return Stop(stop.reason, f"{stop.detail} (the limits of {whose})")
            return stop
        turn = turn.parent
    return None


def _reserve(ctx: TurnContext, tokens: int, cost: float) -> None:
    """Hold (or, negative, give back) a request's estimate on this turn and those above."""
    turn: TurnContext | None = ctx
    while turn is not None:
        turn.reserved_tokens += tokens
        turn.reserved_cost += cost
        turn = turn.parent


def _hold_estimate(ctx: TurnContext) -> tuple[int, float]:
    """A sub-agent's request about to go: its estimate, reserved until it is answered (its
    siblings run in parallel; a lone turn's own requests never overlap, and hold nothing)."""
    tokens = max(_input_estimate(ctx), ctx.last_request_tokens)
    estimate_cost = getattr(ctx.engine.model, "estimate_cost", None)
    cost = estimate_cost(tokens) if callable(estimate_cost) else None
    _reserve(ctx, tokens, cost or 0.0)
    return tokens, cost or 0.0


def _input_estimate(ctx: TurnContext) -> int:
    folder = ctx.log.folder
    return estimate_input_tokens(
        folder.transcript_chars, folder.system, ctx.engine.toolbox.schema_chars
    )


def _request_hash(ctx: TurnContext, max_output: int | None, settings: ModelSettings | None) -> str:
    folder = ctx.log.folder
    head = f"{ctx.engine.model.name}\x00{folder.system}\x00{ctx.engine.toolbox.schema_chars}\x00{max_output}"
    if settings is not None:  # no settings hash as they always did
        head = f"{head}\x00{settings.digest}"
    if ctx.engine.output is not None:
        head = f"{head}\x00{ctx.engine.output.digest}"
    return hashlib.sha256(f"{head}\x00{folder.transcript_hash}".encode()).hexdigest()


_SAME_TOOLS: tuple[tuple[str, ...], str] = ((), "")


def _offered(ctx: TurnContext) -> tuple[tuple[str, ...], str]:
    """The tools this request offers, for its `model.requested` to record when they differ
    from what the thread's log last said (a server changed its list; a resumed session runs
    with other tools than it had); `_SAME_TOOLS`, which writes nothing, when they do not.
    Asked at a run's first request and after the toolbox is replaced (`tools_checked`).
    A sub-agent's log names no tools to start with: its set is recorded only when it may
    change (a toolbox with followers), from its first request on."""
    recorded = ctx.log.folder.offered
    toolbox = ctx.engine.toolbox
    if recorded is None and not toolbox.followers:
        return _SAME_TOOLS
    offered = toolbox.offered
    if recorded is not None and recorded[1] == offered[1]:
        return _SAME_TOOLS
    return offered


async def _step(ctx: TurnContext, after_overflow: bool = False) -> bool:
    """One model call and its commit. False when the turn ended here."""
    folder = ctx.log.folder
    settings = ctx.engine.settings
    if settings is not None and folder.turn_steps:  # the model has answered in this turn
        settings = settings.after_forced_call()  # a forcing tool_choice let go, unless sticky
    max_output = ctx.engine.limits.max_output_tokens
    if settings is not None and settings.max_output_tokens is not None:
        # The tighter cap wins (the limits carry a tenant's).
        max_output = min(max_output or settings.max_output_tokens, settings.max_output_tokens)
    # The context policy's decisions are events: the request below is built from them.
    if ctx.engine.context is not None:
        failed = await ctx.engine.context.before_request(
            ctx.log, ctx.engine.toolbox, max_output, ctx.caller, settings
        )
        if failed is not None:  # the turn ends with the policy's error, by name
            await ctx.log.append(*_closing(ctx, "error", failed))
            return False
    name = ctx.engine.model.name
    # A codec's name is `provider:model`; it leaves out thinking another provider wrote.
    dropped = (
        foreign_thinking(folder.messages, name.partition(":")[0]) if folder.has_thinking else 0
    )
    toolbox = ctx.engine.toolbox
    version = toolbox.version
    tools, digest = _SAME_TOOLS if version == ctx.tools_checked else _offered(ctx)
    await ctx.log.append(
        ModelRequested(
            name,
            _request_hash(ctx, max_output, settings),
            _input_estimate(ctx),
            dropped,
            tools,
            digest,
        )
    )
    ctx.tools_checked = version  # the log names this version's set now
    started = time.perf_counter()
    first = FirstDelta(ctx.on_delta, started) if ctx.on_delta is not None else None
    request = _request(ctx, name, max_output, first, settings)
    held = _hold_estimate(ctx) if ctx.parent is not None else None
    try:
        response = await complete(ctx.engine.model, request, ctx.engine.retry)
    except ProviderError as exc:
        if (
            isinstance(exc, ContextOverflow)
            and ctx.engine.context is not None
            and not after_overflow
            and await ctx.engine.context.after_overflow(
                ctx.log, ctx.engine.toolbox, max_output, exc, ctx.caller, settings
            )
        ):
            return await _step(ctx, after_overflow=True)  # compacted: one more attempt
        await ctx.log.append(
            ModelFailed(exc.kind, str(exc), exc.status, exc.retryable, exc.attempts),
            *_closing(ctx, "error", f"{exc.kind}: {exc}"),
        )
        return False
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit, Parked):
        raise  # Parked: the run stops here unwritten; the request stays open for the next
    except Exception as exc:  # a bug in a custom model must still end the turn by name
        detail = f"{type(exc).__name__}: {exc}"
        await ctx.log.append(
            ModelFailed("unexpected", detail, None, False, 1), *_closing(ctx, "error", detail)
        )
        return False
    finally:
        if held is not None:
            _reserve(ctx, -held[0], -held[1])
    ctx.last_request_tokens = response.usage.input_tokens + response.usage.output_tokens
    answer = ModelResponded(
        message=response.message,
        stop=response.stop,
        raw_stop_reason=response.raw_stop_reason,
        usage=response.usage,
        cost_usd=response.cost_usd,
        latency_ms=round((time.perf_counter() - started) * 1000, 3),
        incomplete=response.incomplete,
        response_hash=response.response_hash,
        first_token_ms=(first.elapsed_ms or 0.0) if first is not None else 0.0,
    )
    calls = response.message.tool_calls
    if response.incomplete:
        cut = "the output limit cut the answer inside a tool call"
        await ctx.log.append(answer, *_closing(ctx, "output_limit", cut))
        return False
    if not calls:
        if ctx.engine.output is not None:
            return await _final_answer(ctx, answer, ctx.engine.output)
        await ctx.log.append(answer, *_closing(ctx, "end_turn"))
        return False
    # Fresh calls are decided before the answer is folded, so the answer and the starts of
    # its calls commit in one batch: the answer is durable before any call runs.
    decisions = decide_calls(calls, (), folder.decisions, (), ctx.engine.toolbox)
    if ctx.engine.cassette is not None:
        decisions = ctx.engine.cassette.decide(decisions)
    return await _settle_calls(ctx, decisions, (answer,))


def _request(
    ctx: TurnContext,
    name: str,
    max_output: int | None,
    first: FirstDelta | None,
    settings: ModelSettings | None,
) -> ModelRequest:
    """The step's request. Without a delta observer (whose clock is the step's own), the
    last request is sent again while it holds the same: the fold's message list grows in
    place, so only a new list (a rebuilt fold), new tools or a new cap make a new one. A
    request is ten frozen fields; building it anew cost about 2 % of a step."""
    folder, engine = ctx.log.folder, ctx.engine
    last = ctx.last_request
    if (
        first is None
        and last is not None
        and last.messages is folder.messages
        and last.tools is engine.toolbox.specs
        and last.max_output_tokens == max_output
        and last.system == folder.system
        and last.model == name
        and last.settings is settings
    ):
        return last
    request = ModelRequest(
        model=name,
        system=folder.system,
        messages=folder.messages,
        tools=engine.toolbox.specs,
        max_output_tokens=max_output,
        on_delta=first,
        on_retry=lambda error, attempt, wait: _record_retry(ctx, error, attempt, wait),
        caller=ctx.caller,
        settings=settings,
        output=None if engine.output is None else engine.output.native,
        live=engine.live and first is not None,
    )
    ctx.last_request = None if first is not None else request
    return request


async def _final_answer(ctx: TurnContext, answer: ModelResponded, output: OutputType) -> bool:
    """A text answer of an agent with an output type: valid, it ends the turn; invalid, it
    goes back to the model as a user message naming the error, until the attempts run out
    (`output_invalid`). False when the turn ended here."""
    problem = output.invalid_text(answer.message)
    if problem is None:
        await ctx.log.append(answer, *_closing(ctx, "end_turn"))
        return False
    failed = output.attempts_failed(ctx.log.folder.messages) + 1
    if failed > output.retries:
        detail = f"no valid output after {failed} attempts: {problem}"
        await ctx.log.append(answer, *_closing(ctx, "output_invalid", detail))
        return False
    await ctx.log.append(answer, UserMessage(output.correction(problem)))
    return True


async def _record_retry(ctx: TurnContext, error: ProviderError, attempt: int, wait: float) -> None:
    """A failed attempt that will be sent again: the request stays open, and the wait
    counts against the turn's time limit like any other."""
    kind, status, retryable = error.kind, error.status, error.retryable
    await ctx.log.append(ModelFailed(kind, str(error), status, retryable, attempt, round(wait, 3)))


async def _settle_calls(
    ctx: TurnContext, decisions: list[Decision], first: tuple[Payload, ...]
) -> bool:
    """Commit `first` with every start, answer and approval request in one batch, then run
    the calls. False when the turn ended here because some call waits for a decision.

    Only batches what `recovery.decide_calls` decided: a call that cannot run (an unknown
    tool, arguments that do not bind, a write a gone runner started, a denial) comes as an
    "answer" and is answered here, never started."""
    log = ctx.log
    fresh = threads.fresh_answer(first)
    decisions = threads.admit(ctx, decisions, fresh)
    if ctx.root.engine.thread_gate is not None:
        decisions = await threads.gate(ctx, decisions, fresh)
    opened = threads.opening(ctx, decisions, fresh)
    batch: list[Payload] = list(first)
    on_threads: list[str] = [log.thread] * len(batch)  # each payload's thread
    to_run: list[Decision] = []
    waiting = False
    for d in decisions:
        if d.action == "run":
            tool = d.tool
            assert tool is not None  # a call to run comes with its tool and bound arguments
            batch.append(ToolStarted(d.call.id, d.call.name, tool.effect))
            on_threads.append(log.thread)
            to_run.append(d)
            if d.call.id in opened:  # a sub-agent's thread opens in the same commit
                thread, payloads = opened[d.call.id]
                batch.extend(payloads)
                on_threads.extend([thread] * len(payloads))
        elif d.answer is not None:  # action "answer"
            batch.append(d.answer)
            on_threads.append(log.thread)
        elif d.action == "request_approval":
            effect = "" if d.tool is None else d.tool.effect
            batch.append(ApprovalRequested(d.call.id, d.call.name, d.call.arguments, effect))
            on_threads.append(log.thread)
            waiting = True
        else:
            waiting = True
    if opened:
        # New threads' folds are opened first, so each sees its own first events; their
        # runs (`threads.run_thread`) take them on and close them.
        branches = [log.branch(Folder(thread)) for thread, _ in opened.values()]
        try:
            await log.append(*batch, threads=on_threads)
        except BaseException:
            for branch in branches:
                branch.close()
            raise
    elif batch:
        await log.append(*batch)

    unfinished = len(to_run)
    may_hold = _may_hold(ctx)

    async def on_finish(call: ToolCall, outcome: CallOutcome) -> None:
        nonlocal unfinished
        if ctx.writes_nothing:  # a call answered as its run hands over or loses the lease
            return
        if outcome.full_output is not None:  # cut at the cap: kept whole, the marker names it
            await keep_output(log.store, outcome.full_output)
        unfinished -= 1
        finished = ToolFinished(
            call.id, outcome.outcome, outcome.content, outcome.duration_ms, outcome.images
        )
        # The step's last result rides with the next commit (the next request, or the
        # turn's end), which follows with no wait between.
        if unfinished == 0 and may_hold and outcome.outcome != "canceled" and log.hold(finished):
            return
        await log.append_shielded(finished)

    if to_run:
        # The calls' servers may ask this session for input, or for its model (MCP).
        asking = ASKER.set(LogAsker(ctx))
        try:
            left_open = await run_calls(
                to_run,
                log.session_id,
                on_finish,
                lambda d: threads.run_thread(ctx, d),
                ctx.root.fence,
            )
        finally:
            ASKER.reset(asking)
        waiting = waiting or bool(left_open)
    if waiting:
        await _end(ctx, Stop("awaiting_approval", "a call waits for a decision"))
    return not waiting


def _may_hold(ctx: TurnContext) -> bool:
    """Whether a step's last tool result may wait for the next commit (`SessionLog.hold`):
    only when nothing between the result and the next append waits on anything (a context
    policy that would wait commits it first: `ContextManager.decide`; a toolbox that
    refreshes its tools from a server waits on it), on the session's own turn (a sub-agent's
    results fold into open threads), and with no stop condition (one may count what an
    `on_event` observer heard, which hears a held result only once it commits)."""
    engine = ctx.engine
    return ctx.parent is None and engine.stop_when is None and not engine.toolbox.followers


async def _end(ctx: TurnContext, stop: Stop) -> None:
    await ctx.log.append(*_closing(ctx, stop.reason, stop.detail))


def _closing(ctx: TurnContext, reason: str, detail: str | None = None) -> list[Payload]:
    """`turn.ended`, and with `end_after_turn` a final turn's `session.ended` in the same
    batch, so no observer ever sees the session idle in between."""
    end = session_outcome(reason) if ctx.end_after_turn else None
    return closing(ctx.log.folder, reason, detail, end=end)


async def _close_cancelled(ctx: TurnContext) -> None:
    if ctx.writes_nothing:
        return
    # A sub-agent's turn is stopped with the session's, for the session's reason.
    await close_canceled_turn(
        ctx.log,
        ctx.root.stop_cause,
        turns_before=ctx.turns_before,
        toolbox=ctx.engine.toolbox,
        gone=ctx.started_before,
    )


async def close_canceled_turn(
    log: SessionLog,
    reason: str,
    end_session: bool = False,
    *,
    turns_before: int | None = None,
    toolbox: Toolbox | None = None,
    gone: Container[str] | None = None,
) -> None:
    """Answer the open calls `canceled` (one a gone runner started, listed in `gone`, or
    any started one when `gone` is None, by its effect as `toolbox` says: a `write` is
    `unknown_effect`), then close the turn (and the session, if asked or if a session-wide
    cancel is pending). Does nothing for a turn already closed.

    `turns_before`: the turns closed when the caller's run began. Once more have closed,
    the caller's turn is over, and an open turn is a later one (a message sent after the
    interrupt landed) that someone else runs: only a session-wide cancel closes it."""
    # Appends still in flight (a result committed as the cancel landed) land first, so the
    # calls answered below are the ones that are really unanswered.
    await log.refresh()
    folder = log.folder
    if folder.terminal:
        return
    session_wide = end_session or folder.cancel_scope == "session"
    if turns_before is not None and folder.turns > turns_before and not session_wide:
        return
    batch = closing(
        folder,
        reason,
        f"the turn was stopped: {reason}",
        calls="canceled",
        end="canceled" if session_wide else None,
        end_detail="canceled by request",
        toolbox=toolbox,
        gone=gone,
    )
    if batch:
        await log.append(*batch, threads=threads_of(batch, log.thread))
