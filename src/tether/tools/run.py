"""Running tool calls: timeouts, errors as data, output caps, parallel turns.

Owns what happens between a call and its result. Committing `tool.started` and
`tool.finished` is the caller's, through the callbacks `run_calls` takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from tether import eager
from tether.errors import EffectUnknown, TetherError
from tether.events import Outcome
from tether.messages import Image, ToolCall
from tether.recovery import CANCELED_BEFORE, CANCELED_RUNNING, Decision, abandoned
from tether.telemetry.logs import current_call
from tether.tools.arguments import bind_arguments
from tether.tools.base import Tool
from tether.tools.schema import LeaseHolder, ToolContext
from tether.tools.threads import DaemonThreads

# Sync tools get threads of their own: the default executor has only a few on small
# machines, which would serialise a turn of parallel blocking calls. Daemon threads: a call
# left running when its turn stopped never keeps the process from exiting.
_SYNC_TOOL_THREADS = DaemonThreads(64, "tether-tool")
# How long a sync call may go on to finish once its turn is stopped; then it is abandoned
# (its thread cannot be stopped) and answered by the recovery rules (`recovery.abandoned`).
SYNC_GRACE = 1.0


@dataclass(frozen=True, slots=True)
class CallOutcome:
    outcome: Outcome
    content: str
    duration_ms: float = 0.0
    # The whole output when `content` was cut at the cap: the caller keeps it as a blob.
    full_output: str | None = None
    images: tuple[Image, ...] = ()  # returned besides the text, in the order returned


class CallCanceled(asyncio.CancelledError):
    """The cancel of a running call, with what the call is answered: `canceled` for an async
    call (cancelled at once), the real result of a sync one that finished within its grace,
    or the recovery rule's answer for one left running. Still a cancel: it propagates."""

    def __init__(self, outcome: CallOutcome) -> None:
        super().__init__()
        self.outcome = outcome


def render_output(value: object, cap: int) -> str:
    """The text the model sees of a tool's return value, cut at `cap` with a visible marker."""
    return cap_output(output_text(value), cap)


def cap_output(text: str, cap: int) -> str:
    """`text` cut at `cap`, with a marker naming its size and the blob (its sha256, as
    `tether.context.blobs` stores it) that keeps all of it."""
    if len(text) <= cap:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return (
        f"{text[:cap]}\n[output truncated: {len(text):,} characters, first {cap:,} shown; "
        f"full output: blob sha256:{digest}]"
    )


def output_text(value: object) -> str:
    """A tool's return value as text, before any cap."""
    if value is None:
        text = ""
    elif isinstance(value, str):
        text = value
    elif isinstance(value, BaseModel):
        text = value.model_dump_json()
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = repr(value)
    return text


async def execute(
    tool: Tool,
    call: ToolCall,
    session_id: str = "",
    kwargs: dict[str, Any] | None = None,
    lease: LeaseHolder | None = None,
) -> CallOutcome:
    """Run one call. `kwargs`: its bound arguments, as `recovery.decide_calls` decided them
    for the loop (the call then takes them over: its `ToolContext` is added to them); without
    them (a bare call, as MCP's tests and benchmarks make) they are bound here, and a call
    whose arguments do not bind is answered `invalid_input`. Never raises for what the tool
    or the model did wrong; re-raises a cancel. `lease`: the lease the call runs under, which
    its `ToolContext` shows the tool (None: no lease, no fence)."""
    started = time.perf_counter()

    def done(outcome: Outcome, content: str) -> CallOutcome:
        return CallOutcome(outcome, content, round((time.perf_counter() - started) * 1000, 3))

    if kwargs is None:
        bound = bind_arguments(tool, call)
        if isinstance(bound, str):
            return done("invalid_input", bound)
        kwargs = bound
    if tool.context_param:
        kwargs[tool.context_param] = ToolContext(session_id, call.id, lease)
    deadline: asyncio.Timeout | None = None
    thread: Future[Any] | None = None
    named = current_call.set(call.id)  # the process log's records name the call
    try:
        if tool.is_async:
            # Inline until the tool first suspends: one that never does needs no timer.
            begun = eager.start(tool.fn(**kwargs))
            if isinstance(begun, eager.Suspended):
                async with _deadline(tool, started) as deadline:
                    value = await begun.rest()
            else:
                value = begun
        else:
            # In a copy of this task's context: the tool's own log records name its call.
            context = contextvars.copy_context()
            work = functools.partial(context.run, tool.fn, **kwargs)
            thread = _SYNC_TOOL_THREADS.submit(work)
            async with _deadline(tool, started) as deadline:
                value = await asyncio.wrap_future(thread)
    except TimeoutError:
        if deadline is not None and deadline.expired():
            return done("timeout", f"tool {tool.name} did not finish within {tool.timeout:g} s")
        return done("error", f"tool {tool.name} raised TimeoutError")
    except asyncio.CancelledError:
        if thread is None:  # an async call saw the cancel itself
            raise CallCanceled(done("canceled", CANCELED_RUNNING)) from None
        raise CallCanceled(await _after_grace(tool, thread, done)) from None
    except EffectUnknown as exc:
        return done("unknown_effect", f"tool {tool.name}: {exc}")
    except TetherError as exc:  # written to be read (an MCP server's failure, say): no class name
        return done("error", f"tool {tool.name} failed: {exc}")
    except Exception as exc:
        return done("error", f"tool {tool.name} raised {type(exc).__name__}: {exc}")
    finally:
        current_call.reset(named)
    return _result(tool, value, done)


async def _after_grace(
    tool: Tool, thread: Future[Any], done: Callable[[Outcome, str], CallOutcome]
) -> CallOutcome:
    """A sync call whose turn was stopped: its result if its thread ends within
    `SYNC_GRACE`, else it is left running and answered by the recovery rules."""
    if thread.cancelled():  # its thread had not taken it up yet: it never ran
        return done("canceled", CANCELED_BEFORE)
    try:
        async with asyncio.timeout(SYNC_GRACE):
            value = await asyncio.wrap_future(thread)
    except TimeoutError:
        return done(*abandoned(tool.effect))
    except Exception as exc:
        return done("error", f"tool {tool.name} raised {type(exc).__name__}: {exc}")
    return _result(tool, value, done)


def _result(tool: Tool, value: object, done: Callable[[Outcome, str], CallOutcome]) -> CallOutcome:
    value, images = _split_images(value)
    if len(images) > MAX_RESULT_IMAGES:
        return done(
            "error",
            f"tool {tool.name} returned {len(images)} images; at most {MAX_RESULT_IMAGES} "
            "go back to the model",
        )
    text = output_text(value)
    finished = done("ok", cap_output(text, tool.output_cap))
    full = text if len(text) > tool.output_cap else None
    if full is None and not images:
        return finished
    return CallOutcome(finished.outcome, finished.content, finished.duration_ms, full, images)


# More would pass every provider's limit on images per request long before the context's.
MAX_RESULT_IMAGES = 8


def _split_images(value: object) -> tuple[object, tuple[Image, ...]]:
    """A tool's value as its text part and its images: an `Image` alone, or a list or tuple
    that holds some (its other items, joined, are the text)."""
    if isinstance(value, Image):
        return "", (value,)
    # A tuple of types, not `list | tuple`: that builds a union object on every result.
    if isinstance(value, (list, tuple)) and any(isinstance(v, Image) for v in value):
        images = tuple(v for v in value if isinstance(v, Image))
        rest = [v for v in value if not isinstance(v, Image)]
        return "\n".join(output_text(v) for v in rest), images
    return value, ()


def _deadline(tool: Tool, started: float) -> asyncio.Timeout:
    """The call's timeout, counted from when it started (`perf_counter` time)."""
    if tool.timeout is None:
        return asyncio.timeout(None)
    loop = asyncio.get_running_loop()
    return asyncio.timeout_at(loop.time() + tool.timeout - (time.perf_counter() - started))


OnFinish = Callable[[ToolCall, CallOutcome], Awaitable[None]]
# Runs a sub-agent's call (its tool has a `subagent`): its result, or None while the
# sub-agent waits for a decision (the call stays open).
ThreadRunner = Callable[[Decision], Awaitable[CallOutcome | None]]


async def run_calls(
    runs: Sequence[Decision],
    session_id: str,
    on_finish: OnFinish,
    run_thread: ThreadRunner | None = None,
    lease: LeaseHolder | None = None,
) -> list[str]:
    """Run a turn's calls in parallel, as `recovery.decide_calls` decided them (action
    "run": the tool and its bound arguments); `on_finish` commits each result as its call
    returns, and the fold puts results in call order. A call that cannot run is never given
    here: its decision answers it. On cancel every running call is cancelled and the cancel
    propagates, once each call that was running is answered through `on_finish` (see
    `CallCanceled`); answering calls that never started is the caller's job, since only it
    knows what is committed. Returns the ids of the calls left open: sub-agents' calls
    (run by `run_thread`) that wait for a decision. `lease`: the lease the calls run under
    (`ToolContext.fence`, `ensure_held`, `lease_lost`)."""
    left_open: list[str] = []

    async def one(run: Decision) -> None:
        call, tool = run.call, run.tool
        assert tool is not None, f"call {call.id} is not one to run: {run.action}"
        try:
            if tool.subagent is not None and run_thread is not None:
                result = await run_thread(run)
                if result is None:
                    left_open.append(call.id)
                    return
                outcome = result
            else:
                outcome = await execute(tool, call, session_id, run.kwargs, lease)
        except CallCanceled as canceled:
            # Answered here, with its real duration, while the cancel goes on; should the
            # commit fail, the turn's closer answers the call as for any cancel.
            with contextlib.suppress(Exception):
                await on_finish(call, canceled.outcome)
            raise
        await on_finish(call, outcome)

    if len(runs) == 1:
        await one(runs[0])  # no task group for the common single call
        return left_open
    try:
        async with asyncio.TaskGroup() as group:
            for run in runs:
                group.create_task(one(run))
    except BaseExceptionGroup as group:
        # Tools never raise here (their failures are results): what does is a commit that
        # failed (a lost lease, a store error). It stops the turn; raise it as itself.
        raise group.exceptions[0] from None
    return left_open
