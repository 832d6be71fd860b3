"""`Agent`: the library face. Creates or continues a session, runs its turn, and reports.

Owns choosing the store, starting and resuming sessions under a lease, and in-process
interrupt and cancel. The loop itself is `loop.run_turn`; steering from other processes is
`control`; what a session is doing is always read from its fold.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether import control
from tether.context import ContextSetting, make_context
from tether.eager import shielded
from tether.errors import HandedOver, LeaseLost, SessionNotFound, UsageError
from tether.events import CancelRequested, Payload, SessionCreated, UserMessage
from tether.lease import claim_lease, worker_id
from tether.limits import Limits, StopCondition
from tether.loop import TurnContext, close_canceled_turn, run_turn
from tether.messages import JSONValue, Message, Usage, user
from tether.providers.base import Caller, Delta, DeltaObserver, Model
from tether.retrying import DEFAULT_RETRY
from tether.scheduler.retry import RetryPolicy
from tether.session_log import Clock, EventObserver, SessionLog, new_session_id
from tether.state import SessionView
from tether.store.base import Lease, Store
from tether.store.open import DEFAULT_STORE_URL, open_store
from tether.tools.base import Tool, Toolbox
from tether.watch import Watched, Watcher

if TYPE_CHECKING:
    import httpx


# The model's streamed output with the session it belongs to.
SessionDeltaObserver = Callable[[str, Delta], None]


@dataclass(frozen=True, slots=True)
class RunResult:
    session_id: str
    output: str
    stop_reason: str
    stop_detail: str | None
    state: str
    usage: Usage
    cost_usd: float | None
    steps: int

    @staticmethod
    def from_view(view: SessionView) -> RunResult:
        return RunResult(
            session_id=view.session_id,
            output=view.last_output,
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


class Agent:
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
    `Gateway` is retried by the gateway's own policy only."""

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
    ) -> None:
        self.model = resolve_model(model)
        # True: the default policy; False: off; or a DefaultPolicy or policy function.
        self.context = make_context(context, self.model)
        self.toolbox = Toolbox(tools)
        self.system = system
        self.limits = limits or Limits()
        self._store_arg = store
        self._store: Store | None = (
            store if store is not None and not isinstance(store, str) else None
        )
        self.stop_when = stop_when
        self.on_event = on_event
        self.on_delta = on_delta
        self.on_session_delta = on_session_delta
        self.clock = clock
        self.lease_ttl = lease_ttl
        self.watch_interval = watch_interval
        self.metadata = metadata or {}
        self.retry = retry
        self._watcher: Watcher | None = None
        self._running: dict[str, tuple[asyncio.Task[None], TurnContext]] = {}

    @property
    def store(self) -> Store:
        if self._store is None:
            url = self._store_arg if isinstance(self._store_arg, str) else None
            self._store = open_store(url or os.environ.get("TETHER_STORE") or DEFAULT_STORE_URL)
        return self._store

    async def _open_log(self, session_id: str | None) -> SessionLog:
        """The log of an existing session, or of a new one (not yet written)."""
        observers = (self.on_event,) if self.on_event else ()
        if session_id is None:
            return SessionLog(self.store, new_session_id(), clock=self.clock, observers=observers)
        log = await SessionLog.load(self.store, session_id, clock=self.clock, observers=observers)
        if log.folder.last_seq == 0:
            raise SessionNotFound(session_id)
        return log

    async def run(
        self,
        task: str | Message | None,
        *,
        session_id: str | None = None,
        lease_wait: float = 0.0,
        lease: Lease | None = None,
        end_session: bool = False,
        caller: Caller | None = None,
    ) -> RunResult:
        """Run one turn: a new session for `task`, or `task` sent to session `session_id`.
        With `task=None`, continue the session's open turn (after an approval or a crash).
        With `end_session`, a turn that stops for good also ends the session (`completed`,
        or `failed` after an error or a limit), in the same commit as `turn.ended`.

        The run holds the session's lease: if another worker holds it, wait up to
        `lease_wait` seconds for it to be released or to expire, then raise `LeaseHeld`.
        A worker that claimed the session already (e.g. `claim_runnable`) passes its `lease`:
        the run uses it, and releases it at the end as its own. `caller` goes with every
        model request of the run (a runtime's shared gateway orders and parks by it)."""
        if session_id is not None and session_id in self._running:
            raise UsageError(f"session {session_id} is already running in this agent")
        log = await self._open_log(session_id)
        if log.folder.terminal:
            raise UsageError(
                f"session {log.session_id} has ended ({log.folder.state}); start a new one"
            )
        if lease is not None and lease.session_id != log.session_id:
            raise UsageError(f"a lease of session {lease.session_id} cannot run {log.session_id}")
        log.lease = lease or await claim_lease(
            self.store, log.session_id, worker_id(), self.lease_ttl, lease_wait
        )
        try:
            first: list[Payload] = [self._session_created()] if session_id is None else []
            if task is not None:
                first.append(UserMessage(task if isinstance(task, Message) else user(task)))
            try:
                if session_id is not None:
                    await log.refresh()  # what was appended between reading and claiming
                if first:
                    await log.append(*first)
            except asyncio.CancelledError:
                # Cancelled before the loop took over: a turn that opened (the batch may
                # have landed all the same) still ends by name.
                await asyncio.shield(close_canceled_turn(log, "interrupted"))
                raise
            ctx = TurnContext(
                log,
                self.model,
                self.toolbox,
                self.limits,
                self.stop_when,
                self._delta_observer(log.session_id),
                retry=self.retry,
                started_at=time.monotonic(),
                context=self.context,
                end_after_turn=end_session,
                caller=caller,
            )
            await self._drive(ctx)
        finally:
            if log.lease is not None:
                await shielded(self.store.release(log.lease))
        if ctx.stop_cause == "handed_over":
            raise HandedOver(
                f"session {log.session_id}: handed over; its turn stays open for the next runner"
            )
        if ctx.stop_cause == "lease_lost":
            raise LeaseLost(
                f"session {log.session_id}: another worker took the session over; "
                "this run stopped without writing"
            )
        # A cancel that came as the turn ended, after the runner's last look, was addressed
        # to this run: honour it now (control closes it itself only once the lease is free).
        await log.refresh()
        if log.folder.cancel_scope == "session" and not log.folder.terminal:
            await control.request_stop(self.store, log.session_id, "session")
            await log.refresh()
        return RunResult.from_view(log.folder.view())

    async def resume(self, session_id: str, *, lease_wait: float = 0.0) -> RunResult:
        """Continue a session from its log, in this process: the recovery rules of
        `tether.recovery` decide what happens to the calls an earlier runner left open."""
        return await self.run(None, session_id=session_id, lease_wait=lease_wait)

    def _delta_observer(self, session_id: str) -> DeltaObserver | None:
        per_session, plain = self.on_session_delta, self.on_delta
        if per_session is None:
            return plain

        def observe(delta: Delta) -> None:
            if plain is not None:
                plain(delta)
            per_session(session_id, delta)

        return observe

    def _session_created(self) -> SessionCreated:
        return SessionCreated(
            model=self.model.name,
            system=self.system,
            tools={t.name: t.schema_hash for t in self.toolbox},
            limits=self.limits.to_json(),
            metadata=dict(self.metadata),
        )

    async def _drive(self, ctx: TurnContext) -> None:
        sid = ctx.log.session_id
        inner = asyncio.create_task(run_turn(ctx))
        self._running[sid] = (inner, ctx)

        def on_news() -> None:
            if ctx.log.folder.cancel_scope and not inner.done():
                inner.cancel()  # another process asked: the turn closes as interrupted

        def on_lease_lost() -> None:
            # The stale lease stays on the log, so any append still in flight is refused.
            ctx.stop("lease_lost")
            inner.cancel()

        watcher = self._get_watcher()
        watcher.watch(Watched(ctx.log, self.lease_ttl, on_news, on_lease_lost))
        try:
            await self._await_turn(inner, ctx)
        finally:
            if inner.cancelled() and not ctx.writes_nothing:
                # A turn cancelled before its first step never ran run_turn's own close;
                # for one that did, this finds the turn closed and does nothing.
                await asyncio.shield(
                    close_canceled_turn(ctx.log, ctx.stop_cause, turns_before=ctx.turns_before)
                )
            watcher.unwatch(sid)
            self._running.pop(sid, None)

    def _get_watcher(self) -> Watcher:
        if self._watcher is None:
            self._watcher = Watcher(self.store, self.watch_interval)
        return self._watcher

    async def _await_turn(self, inner: asyncio.Task[None], ctx: TurnContext) -> None:
        """Wait for the turn. A cancel of our caller reaches the turn through the await (it
        closes itself, then the cancel propagates); a cancel of the turn alone (interrupt(),
        cancel(), another process, the time limit) ends it here. A timer rather than
        `asyncio.wait`: with thousands of sessions, every object a waiting run holds counts."""
        deadline = self.limits.max_seconds
        timer = None
        if deadline is not None:

            def expire() -> None:
                if not inner.done():
                    ctx.stop("time_limit")
                    inner.cancel()

            timer = asyncio.get_running_loop().call_later(deadline, expire)
        try:
            await inner
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        finally:
            if timer is not None:
                timer.cancel()

    def run_sync(self, task: str | Message | None, *, session_id: str | None = None) -> RunResult:
        return asyncio.run(self.run(task, session_id=session_id))

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

    async def _stop(self, session_id: str, scope: str) -> None:
        running = self._running.get(session_id)
        if running is None:
            await control.request_stop(self.store, session_id, scope)
            return
        inner, ctx = running
        folder = ctx.log.folder
        if not folder.terminal and (folder.turn_open or scope == "session"):
            # With the turn already ended, the run honours a session cancel as it finishes.
            await ctx.log.append(CancelRequested(scope))
        ctx.stop("interrupted")
        inner.cancel()
        await asyncio.gather(inner, return_exceptions=True)

    async def hand_over(self, session_id: str) -> bool:
        """Stop the session's run here without closing its turn, for another runner to go
        on with it (a worker shutting down): nothing more is written, the lease is let go,
        and the run raises `HandedOver`. The open model request is asked again, and calls
        that were running are settled by the recovery rules (`tether.recovery`). False when
        this agent is not running the session."""
        running = self._running.get(session_id)
        if running is None:
            return False
        inner, ctx = running
        ctx.stop("handed_over")
        inner.cancel()
        await asyncio.gather(inner, return_exceptions=True)
        return True

    async def view(self, session_id: str) -> SessionView:
        log = await self._open_log(session_id)
        return log.folder.view()

    async def close(self) -> None:
        if self._watcher is not None:
            await self._watcher.close()
        if self._store is not None:
            await self._store.close()
