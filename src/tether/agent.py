"""`Agent`: the library face. Creates or continues a session, runs its turn, and reports.

Owns choosing the store, the session's first event, and in-process interrupt and cancel.
Running a turn under a lease is `session.run.run_session` (the worker takes the same
path); the loop itself is `loop.run_turn`; steering from other processes is `control`;
what a session is doing is always read from its fold.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, cast

from typing_extensions import TypeVar

from tether.context import ContextSetting, make_context
from tether.errors import SessionNotFound, UsageError
from tether.events import (
    CancelRequested,
    CancelScope,
    ForkKind,
    Payload,
    SessionCreated,
    UserMessage,
)
from tether.limits import Limits, StopCondition
from tether.loop import Engine
from tether.messages import Image, JSONValue, Message, Usage, user, user_parts
from tether.providers.base import Delta, DeltaObserver, Model
from tether.retrying import DEFAULT_RETRY
from tether.scheduler.retry import RetryPolicy
from tether.session import control
from tether.session.fork import ForkChanges, Forked, ForkPoint, OpenCalls
from tether.session.fork import fork as fork_session
from tether.session.log import Clock, EventObserver, SessionLog, new_session_id
from tether.session.run import Runs, run_session
from tether.session.threads import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_THREADS,
    HistoryFilter,
    SubAgent,
    check_name,
)
from tether.state import SessionView
from tether.store.base import Store
from tether.store.open import DEFAULT_STORE_URL, open_store
from tether.telemetry.ids import new_trace_id
from tether.telemetry.live import observers as live_spans
from tether.telemetry.logs import scope as log_scope
from tether.tools.base import Tool, Toolbox, make_tool

if TYPE_CHECKING:
    import httpx

    from tether.output import OutputMode, OutputType
    from tether.settings import ModelSettings

# What `RunResult.output` is: the last answer's text, or the agent's `output_type`.
OutputT = TypeVar("OutputT", default=str)


# The model's streamed output with the session it belongs to.
SessionDeltaObserver = Callable[[str, Delta], None]
# What `Agent.run` takes as a task: a text, a whole message, or texts and images in order.
Task = str | Message | Sequence[str | Image]


def _task_message(task: Task) -> Message:
    if isinstance(task, Message):
        return task
    if isinstance(task, str):
        return user(task)
    return user_parts(task)


@dataclass(frozen=True, slots=True)
class RunResult(Generic[OutputT]):
    """How a run ended. `output` is the last answer's text, or for an agent with an
    `output_type` the validated instance; `text` is always the last answer's text."""

    session_id: str
    output: OutputT
    stop_reason: str
    stop_detail: str | None
    state: str
    usage: Usage
    cost_usd: float | None
    steps: int
    text: str = ""

    @staticmethod
    def from_view(view: SessionView) -> RunResult[str]:
        return RunResult(
            session_id=view.session_id,
            output=view.last_output,
            text=view.last_output,
            stop_reason=view.stop_reason or "",
            stop_detail=view.stop_detail,
            state=view.state,
            usage=view.usage,
            cost_usd=view.cost_usd,
            steps=view.turn_steps,
        )


def resolve_model(
    model: Model | str, http_client: httpx.AsyncClient | None = None, *, stream: bool = False
) -> Model:
    """A model object, or one built from a model string; `http_client` is the client a
    provider model makes its requests with (default: one of its own); with `stream`, a
    provider model streams its answers (its observers see the text as it comes)."""
    if not isinstance(model, str):
        return model
    if model.startswith("python:"):
        return _model_from_python(model.removeprefix("python:"))
    if model.startswith("scripted:"):
        from tether.demo import demo_model

        if model == "scripted:demo":
            return demo_model()
        raise UsageError(f"unknown scripted model {model!r}: the only named one is scripted:demo")
    try:
        from tether.providers.registry import model_from_string
    except ImportError as exc:
        raise UsageError(f"unknown model {model!r}: no provider registry is installed") from exc
    return model_from_string(model, http_client=http_client, stream=stream)


def _model_from_python(spec: str) -> Model:
    """`python:MODULE:ATTR`: a Model object (or a function returning one) from a module."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"model python:{spec} must be python:MODULE:ATTR")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise UsageError(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from exc
    value = getattr(module, attr, None)
    # A class passes the Protocol check by its attributes alone: it is a factory, like a
    # function, and its instance is the model.
    if (
        value is not None
        and (inspect.isclass(value) or not isinstance(value, Model))
        and callable(value)
    ):
        try:
            value = value()
        except Exception as exc:
            raise UsageError(
                f"python:{spec} could not be called to make a model: "
                f"{type(exc).__name__}: {str(exc)[:200]}"
            ) from exc
    if inspect.isclass(value) or not isinstance(value, Model) or not isinstance(value.name, str):
        raise UsageError(f"python:{spec} is not a model (it needs .name and async .complete)")
    return value


def _output(
    output_type: object, mode: OutputMode | None, retries: int, model: Model
) -> OutputType | None:
    """The agent's output type, its mode decided: native where the model says it can."""
    if output_type is None:
        if mode is not None or retries != 2:
            raise UsageError("output_mode and output_retries need an output_type")
        return None
    from tether.output import OutputType

    output = OutputType.of(output_type, mode=mode, retries=retries)
    if output.mode is None:
        native = getattr(model, "native_output", False) is True
        output = output.configured("native" if native else "tool", output.retries)
    return output


def _forced_final(settings: ModelSettings | None) -> ModelSettings:
    """With no tool but `final_result`, the model is made to call it (unless the agent's
    settings choose otherwise): an answer in text would only be sent back, so the choice
    holds after an invalid call too."""
    from tether.settings import ModelSettings, merged

    forced = ModelSettings(tool_choice="final_result", reset_tool_choice=False)
    return merged(forced, settings) or forced


def _ask(task: str) -> str:
    """Args:
    task: what to ask of it, with everything it needs to know: it sees nothing else of
    this conversation."""
    raise UsageError("a sub-agent's tool runs inside an agent's turn, never by itself")


def _transfer() -> str:
    raise UsageError("a handoff's tool runs inside an agent's turn, never by itself")


@functools.cache
def _sub_agent_tools() -> tuple[Tool, Tool]:
    """The two shapes of a sub-agent's tool (ask it a task; take the turn over), made once:
    each agent's tool is one of them renamed. `idempotent`: a call whose thread is in the
    log goes on with it after a crash, never starts anew; no timeout: a sub-agent's time
    is bounded by its limits."""
    ask = make_tool(_ask, name="ask", effect="idempotent", timeout=None)
    transfer = make_tool(_transfer, name="transfer", effect="idempotent", timeout=None)
    return ask, transfer


class Agent(Generic[OutputT]):
    """`Agent(model, tools=..., system=..., limits=..., store=..., stop_when=...)`.

    `store` is a `Store` or a store URL; by default `TETHER_STORE` or `sqlite:///tether.db`
    in the working directory, opened at the first run. `on_delta` sees the model's streamed
    output; `on_session_delta` sees it with the session it belongs to, for a host that runs
    many sessions on one agent (a worker).

    `retry` is the policy for a failed model call (`RetryPolicy()` by default: rate limits,
    overload, server and connection errors, with exponential backoff, jitter and the
    server's `retry-after` as a floor; never quota, authentication, bad requests or context
    overflow); `None` makes one attempt. Each retry is a `model.failed` event with
    `retrying_in`, and its wait counts against `limits.max_seconds`. A model behind a
    `Gateway` is retried by the gateway's own policy only.

    Sub-agents: a `name`d agent is offered to another as a tool with `as_tool()` (each call
    runs it as a thread of the caller's session, its answer the call's result; calls in
    one answer run in parallel), and `handoffs=[agent, ...]` offers `transfer_to_NAME`
    tools that hand the rest of the turn, with the conversation so far, to that agent.
    Every thread counts against the session's `limits`; `max_depth` and `max_threads` cap
    how deep sub-agents nest and how many run at once (refused calls are answered as
    errors the model reads).

    `settings` (`ModelSettings`) shape every request: sampling, the output cap, stop
    sequences, `tool_choice`, reasoning, a timeout per attempt, extra body fields. A run's
    own (`run(task, settings=...)`) go over them field by field. They are checked here
    against the tools and the provider (a setting it cannot honour is a `UsageError`), and
    recorded in a new session's `session.created` metadata as `"model_settings"`. A resumed
    session is run with the resuming agent's settings (and its run's), as it is with its
    model, tools and limits; each request's `request_hash` covers them, so a change shows.

    `output_type` (a pydantic model, dataclass, TypedDict, plain type, or a
    `tether.output.OutputType`) makes `result.output` a validated instance. The model is
    asked for JSON of its schema natively where the provider can say so (`output_mode=
    "native"`), or given a `final_result` tool to call with the answer (`"tool"`); by default
    native for OpenAI Chat, Responses and Ollama, the tool for Anthropic and other models.
    An invalid answer goes back to the model with the validation error (a `final_result`
    call is answered `invalid_input`; a text answer gets a user message), at most
    `output_retries` times, then the turn ends `output_invalid`. A run whose turn ends
    without a valid answer raises `tether.output.OutputMissing`, which carries the result.
    A new session records the type in `session.created` metadata (`output_type`)."""

    def __init__(
        self,
        model: Model | str,
        *,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        system: str | None = None,
        limits: Limits | None = None,
        store: Store | str | None = None,
        stop_when: StopCondition | None = None,
        on_event: EventObserver | None = None,
        on_delta: DeltaObserver | None = None,
        on_session_delta: SessionDeltaObserver | None = None,
        clock: Clock | None = None,
        lease_ttl: float = 30.0,
        watch_interval: float = 0.5,
        metadata: dict[str, JSONValue] | None = None,
        context: ContextSetting = True,
        retry: RetryPolicy | None = DEFAULT_RETRY,
        name: str | None = None,
        handoffs: Iterable[Agent | Tool] = (),
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_threads: int = DEFAULT_MAX_THREADS,
        settings: ModelSettings | None = None,
        output_type: type[OutputT] | OutputType | None = None,
        output_mode: OutputMode | None = None,
        output_retries: int = 2,
    ) -> None:
        self.name = None if name is None else check_name(name)
        if max_depth < 0 or max_threads < 1:
            raise UsageError(
                f"max_depth must be 0 or more and max_threads 1 or more, "
                f"not {max_depth} and {max_threads}"
            )
        self.model = resolve_model(model)
        handoff_tools = [h.handoff_tool() if isinstance(h, Agent) else h for h in handoffs]
        self.output = _output(output_type, output_mode, output_retries, self.model)
        final = [self.output.final_tool()] if self.output and self.output.mode == "tool" else []
        self.toolbox = Toolbox([*tools, *handoff_tools, *final])
        self.system = system
        self.limits = limits or Limits()
        if final and len(self.toolbox.specs) == 1:
            settings = _forced_final(settings)
        self.settings = None if settings is None else self._checked(settings, None)
        # context: True, the default policy; False, off; or a DefaultPolicy or function.
        self.engine = Engine(
            self.model,
            self.toolbox,
            self.limits,
            stop_when,
            retry=retry,
            context=make_context(context, self.model),
            max_depth=max_depth,
            max_threads=max_threads,
            settings=self.settings,
            output=self.output,
        )
        self._store_arg = store
        self._store: Store | None = (
            store if store is not None and not isinstance(store, str) else None
        )
        self.on_event = on_event
        self.on_delta = on_delta
        self.on_session_delta = on_session_delta
        self.clock = clock
        self.lease_ttl = lease_ttl
        self.watch_interval = watch_interval
        self.metadata = metadata or {}
        self._runs: Runs | None = None

    def as_tool(
        self,
        *,
        description: str | None = None,
        limits: Limits | None = None,
        name: str | None = None,
    ) -> Tool:
        """This agent as a tool another agent calls with one argument, `task`: each call runs
        it as a thread of the caller's session, and its final answer (or how it stopped,
        as an error) is the call's result. `limits` are the thread's own (by default this
        agent's), and hold only within what the caller's session has left."""
        tool_name = self._sub_name(name)
        engine = self.engine if limits is None else replace(self.engine, limits=limits)
        return replace(
            _sub_agent_tools()[0],
            name=tool_name,
            description=description
            or f"Ask the {tool_name} agent to do a task; its final answer is the result.",
            subagent=SubAgent(tool_name, engine, self.system),
        )

    def handoff_tool(
        self,
        *,
        description: str | None = None,
        history_filter: HistoryFilter | None = None,
        name: str | None = None,
    ) -> Tool:
        """A `transfer_to_NAME` tool: calling it hands the rest of the caller's turn to this
        agent, on a thread of its own that starts with the conversation so far (through
        `history_filter`, if given); its answer is the turn's."""
        agent_name = self._sub_name(name)
        return replace(
            _sub_agent_tools()[1],
            name=f"transfer_to_{agent_name}",
            description=description
            or f"Hand the conversation over to the {agent_name} agent, who answers from here.",
            subagent=SubAgent(agent_name, self.engine, self.system, True, history_filter),
        )

    def _sub_name(self, name: str | None) -> str:
        if self.output is not None and self.output.mode == "tool":
            # A thread's answer is its last text; a final_result call has none.
            raise UsageError(
                "a sub-agent with an output_type answers in text only: give it output_mode='native'"
            )
        chosen = name or self.name
        if chosen is None:
            raise UsageError("a sub-agent needs a name: Agent(..., name='researcher')")
        return check_name(chosen)

    @property
    def store(self) -> Store:
        if self._store is None:
            url = self._store_arg if isinstance(self._store_arg, str) else None
            self._store = open_store(url or os.environ.get("TETHER_STORE") or DEFAULT_STORE_URL)
        return self._store

    @property
    def runs(self) -> Runs:
        """The turns this agent runs now (made with the store, at the first run)."""
        if self._runs is None:
            self._runs = Runs(
                self.store, lease_ttl=self.lease_ttl, watch_interval=self.watch_interval
            )
        return self._runs

    async def _open_log(self, session_id: str | None) -> SessionLog:
        """The log of an existing session, or of a new one (not yet written)."""
        observers: tuple[EventObserver, ...] = (self.on_event,) if self.on_event else ()
        if session_id is None:
            observers += live_spans()
            return SessionLog(self.store, new_session_id(), clock=self.clock, observers=observers)
        log = await SessionLog.load(self.store, session_id, clock=self.clock, observers=observers)
        if log.folder.last_seq == 0:
            raise SessionNotFound(session_id)
        return log

    async def run(
        self,
        task: Task | None,
        *,
        session_id: str | None = None,
        lease_wait: float = 0.0,
        end_session: bool = False,
        settings: ModelSettings | None = None,
    ) -> RunResult[OutputT]:
        """Run one turn: a new session for `task`, or `task` sent to session `session_id`.
        `task` is a text, a `Message`, or a list of texts and `Image`s (one user message, in
        that order: `["what is in this photo?", Image(data)]`). With `task=None`, continue
        the session's open turn (after an approval or a crash). With `end_session` (a
        one-shot task), a turn that stops for good also ends the session (`completed`, or
        `failed` after an error or a limit), in the same commit as `turn.ended`.

        `settings` go over the agent's for this run only, field by field (`merged`).

        The run holds the session's lease: if another worker holds it, wait up to
        `lease_wait` seconds for it to be released or to expire, then raise `LeaseHeld`."""
        engine = self.engine
        if settings is not None:
            engine = replace(engine, settings=self._checked(self.settings, settings))
        log = await self._open_log(session_id)
        opening: list[Payload] = [self._session_created(engine)] if session_id is None else []
        if task is not None:
            opening.append(UserMessage(_task_message(task)))
        with log_scope():  # the run's records name its session; the caller's after it do not
            view = await run_session(
                self.runs,
                engine,
                log,
                opening=opening,
                lease_wait=lease_wait,
                end_session=end_session,
                on_delta=self._delta_observer(log.session_id),
            )
        result = RunResult.from_view(view)
        if self.output is None:
            return cast(RunResult[OutputT], result)
        return self._typed(result, log.folder.messages)

    def _typed(self, result: RunResult[str], messages: list[Message]) -> RunResult[OutputT]:
        """The result with the turn's validated output, read from the transcript."""
        from tether.output import OutputMissing, last_output

        assert self.output is not None
        found, value = (False, None)
        if result.stop_reason == "end_turn":
            found, value = last_output(self.output, messages)
        if not found:
            raise OutputMissing(replace(cast(RunResult[None], result), output=None))
        return cast(RunResult[OutputT], replace(cast(RunResult[object], result), output=value))

    async def resume(
        self, session_id: str, *, lease_wait: float = 0.0, settings: ModelSettings | None = None
    ) -> RunResult[OutputT]:
        """Continue a session from its log, in this process: the recovery rules of
        `tether.recovery` decide what happens to the calls an earlier runner left open.
        `settings` go over the agent's, as for `run`: a run's own settings are not in the
        log, so a resumed turn that should keep them is given them again."""
        return await self.run(None, session_id=session_id, lease_wait=lease_wait, settings=settings)

    async def fork(
        self,
        session_id: str,
        at: ForkPoint | None = None,
        *,
        changes: ForkChanges | None = None,
        message: str | None = None,
        kind: ForkKind = "fork",
        open_calls: OpenCalls = "refuse",
    ) -> Forked:
        """Fork a session of this agent's store (`tether.session.fork.fork`): a new session
        whose log is this one's up to `at` (default: its end), then its own, configured as
        the parent with `changes`. It runs nothing: `resume(child)` runs a child with a turn
        to run (forked mid-turn, or given a `message`), `run(task, session_id=child)`
        continues an idle one."""
        return await fork_session(
            self.store,
            session_id,
            at or ForkPoint(),
            changes=changes or ForkChanges(),
            message=message,
            kind=kind,
            open_calls=open_calls,
        )

    def _checked(
        self, base: ModelSettings | None, over: ModelSettings | None
    ) -> ModelSettings | None:
        """`over` merged over `base` (None: the defaults), refused now if every request
        would be: a `tool_choice` naming no tool of this agent's, a setting the provider
        cannot honour. Settings are loaded only by agents that have some."""
        from tether.settings import check_settings, merged

        settings = merged(base, over)
        check_settings(settings, self.model, self.toolbox.specs)
        return settings

    def _delta_observer(self, session_id: str) -> DeltaObserver | None:
        per_session, plain = self.on_session_delta, self.on_delta
        if per_session is None:
            return plain

        def observe(delta: Delta) -> None:
            if plain is not None:
                plain(delta)
            per_session(session_id, delta)

        return observe

    def _session_created(self, engine: Engine) -> SessionCreated:
        metadata = dict(self.metadata)
        metadata.setdefault("trace_id", new_trace_id())  # every run's spans in one trace
        if engine.settings is not None:  # what the session was started with, on record
            metadata["model_settings"] = engine.settings.to_json()
        if self.output is not None:
            metadata["output_type"] = self.output.to_json()
        return SessionCreated(
            model=self.model.name,
            system=self.system,
            tools={t.name: t.schema_hash for t in self.toolbox},
            limits=self.limits.to_json(),
            metadata=metadata,
        )

    def run_sync(
        self,
        task: Task | None,
        *,
        session_id: str | None = None,
        settings: ModelSettings | None = None,
    ) -> RunResult[OutputT]:
        """`run` for code that is not async: one turn, run to its end on an event loop of its
        own (`asyncio.run`), so it cannot be called from a running loop (there, `await
        agent.run(...)`). `task`, `session_id` and `settings` are as for `run`; it does not
        wait for a held lease (`lease_wait` 0) and leaves the session open after the turn."""
        return asyncio.run(self.run(task, session_id=session_id, settings=settings))

    async def interrupt(self, session_id: str) -> None:
        """End the running turn `interrupted`; the session stays usable."""
        await self._stop(session_id, "turn")

    async def cancel(self, session_id: str) -> None:
        """End the session `canceled` (terminal). Cancelling an ended session is a no-op."""
        await self._stop(session_id, "session")

    async def decide(
        self, session_id: str, call_id: str, allow: bool, reason: str | None = None
    ) -> None:
        """Allow or deny a call that waits for approval; `resume` then runs or answers it."""
        await control.decide(self.store, session_id, call_id, allow, reason)

    async def _stop(self, session_id: str, scope: CancelScope) -> None:
        ctx = None if self._runs is None else self._runs.turn(session_id)
        if ctx is None:
            await control.request_stop(self.store, session_id, scope)
            return
        folder = ctx.log.folder
        if not folder.terminal and (folder.turn_open or scope == "session"):
            # With the turn already ended, the run honours a session cancel as it finishes.
            await ctx.log.append(CancelRequested(scope))
        await self.runs.stop(session_id, "interrupted")

    async def hand_over(self, session_id: str) -> bool:
        """Stop the session's run here without closing its turn, for another runner to go
        on with it: nothing more is written, the lease is let go, and the run raises
        `HandedOver`. The open model request is asked again, and calls that were running
        are settled by the recovery rules (`tether.recovery`). False when this agent is not
        running the session."""
        return self._runs is not None and await self._runs.stop(session_id, "handed_over")

    async def view(self, session_id: str) -> SessionView:
        log = await self._open_log(session_id)
        return log.folder.view()

    async def close(self) -> None:
        if self._runs is not None:
            await self._runs.close()
        if self._store is not None:
            await self._store.close()
